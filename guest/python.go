package guest

import _ "embed" // the Python session driver

// PythonDriver is the source of the Python session driver (pydriver.py):
// an interpreter that keeps its variables between calls, spoken to in
// JSON lines on its stdin and stdout.
//
//go:embed pydriver.py
var PythonDriver string

// PythonSessionScript, run as `sh -c PythonSessionScript sh DRIVER`,
// starts the driver given as $1 with the sandbox's python3, or says that
// there is none.
const PythonSessionScript = `if command -v python3 >/dev/null 2>&1; then exec python3 -u -c "$1"; fi
echo "python3 is not installed in this sandbox (install it with the install tool)" >&2
exit 127`
