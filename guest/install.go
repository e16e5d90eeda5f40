package guest

import (
	"errors"
	"fmt"
	"strings"
)

// InstallScript installs packages with whichever package manager the image
// has (apk, apt-get or dnf). Package names are checked, never quoted into
// something else.
func InstallScript(pkgs []string) (string, error) {
	if len(pkgs) == 0 {
		return "", errors.New("no packages given")
	}
	for _, p := range pkgs {
		if !validPackage(p) {
			return "", fmt.Errorf("invalid package name %q", p)
		}
	}
	list := strings.Join(pkgs, " ")
	return `if command -v apk >/dev/null 2>&1; then apk add --no-progress ` + list + `
elif command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1 || apt-get update -qq || exit $?
  apt-get install -y -qq --no-install-recommends ` + list + `
elif command -v dnf >/dev/null 2>&1; then dnf install -y -q ` + list + `
else echo "no supported package manager (apk, apt-get, dnf) in this image" >&2; exit 127; fi`, nil
}

func validPackage(p string) bool {
	if p == "" || len(p) > 200 || p[0] == '-' {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._+:=~-", c) >= 0) {
			return false
		}
	}
	return true
}
