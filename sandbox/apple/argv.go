package apple

import "slices"

// Builds reports whether the dialect, on a CLI whose features are f,
// may build argv (without the program): whether the choices it makes by
// version agree with f. A `run` with --init needs Features.Init;
// `system status` takes --format json exactly when StatusJSON;
// `image delete` takes --force exactly when ImageDeleteForce; `cp` needs
// Copy; `export` needs TarExport (snapshots export only then); the
// registry domain is read with `system property list` from 1.0.0 and
// with `system property get` before. Any other argv is built alike for
// every version. The argv contract test uses it to check a recorded argv
// against every release the dialect would send it to.
func Builds(f Features, argv []string) bool {
	has := func(s ...string) bool {
		for i := 0; i+len(s) <= len(argv); i++ {
			if slices.Equal(argv[i:i+len(s)], s) {
				return true
			}
		}
		return false
	}
	if len(argv) == 0 {
		return true
	}
	switch {
	case argv[0] == "run":
		return !has("--init") || f.Init
	case has("system", "status"):
		return has("--format", "json") == f.StatusJSON
	case has("image", "delete"):
		return has("--force") == f.ImageDeleteForce
	case argv[0] == "cp":
		return f.Copy
	case argv[0] == "export":
		return f.TarExport
	case has("system", "property", "list"):
		return f.Version.AtLeast(v1_0)
	case has("system", "property", "get"):
		return !f.Version.AtLeast(v1_0)
	}
	return true
}
