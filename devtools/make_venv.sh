#!/bin/sh
# make_venv.sh PYTHON VENV: make (or reuse) the virtual environment that `make run` / `make test` install into.
#
# Debian's and Ubuntu's python3 is "externally managed" (PEP 668): pip refuses to install into it, so the
# Makefile installs into a virtual environment of its own, made here with PYTHON's `venv`, seeing PYTHON's
# packages (PyTorch for `make run`'s example, and whatever an offline machine has). They are seen through a
# .pth file that lists PYTHON's site-packages folders, not --system-site-packages: that flag also runs every
# .pth hook of those folders at each start of Python (a sandbox's certifi hook, an editable install's import
# finder: 36 ms of the 48 a start took on the CI machine, and nsightwrap and its tests start thousands of
# Pythons: a guard per run, the tests' fakes; issue 20).
# Reused while it was made by the same interpreter in this layout and still runs; remade otherwise.
# A folder at VENV that this script did not make is used as it is if it runs, and never removed.
set -eu
python=$1
venv=$2
marker="$venv/.made-by-nsightwrap"

if ! want=$("$python" -c 'import sys; print(sys.version.split()[0], sys.base_prefix, "site-by-pth")' 2>/dev/null); then
    echo "nsightwrap: cannot run PYTHON=$python; install Python >= 3.10, or give make PYTHON=/path/to/python3" >&2
    exit 1
fi
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c '' 2>/dev/null; then
    if [ ! -f "$marker" ] || [ "$(cat "$marker")" = "$want" ]; then
        exit 0  # up to date (or a venv of the user's own: used as it is)
    fi
    echo "nsightwrap: $venv was made by another Python or in an older layout ($(cat "$marker")); making it again with $python"
elif [ -e "$venv" ] && [ ! -f "$marker" ]; then
    echo "nsightwrap: $venv exists but is not a working virtual environment; remove it, or give make VENV=another-folder" >&2
    exit 1
fi
rm -rf "$venv"
echo "nsightwrap: making the virtual environment $venv with $python"
# Until the marker is written, a failure (or Ctrl-C) removes the half-made venv: one without a marker would be
# taken for the user's own next time and used as it is.
trap 'rm -rf "$venv"' EXIT
trap 'exit 130' INT TERM
if ! "$python" -m venv "$venv"; then
    rm -rf "$venv"
    version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    echo "nsightwrap: $python cannot make a virtual environment (its venv module or ensurepip is missing)." >&2
    echo "  On Debian/Ubuntu: sudo apt install python$version-venv (or python3-venv), then run make again;" >&2
    echo "  elsewhere, give make PYTHON=/path/to/a/python3 that has venv." >&2
    exit 1
fi
# PYTHON's packages, seen after the venv's own, in --system-site-packages' order (the user's folder first), with
# the folders their own .pth files add (an editable or `setup.py develop` install, easy-install.pth); the .pth
# files' `import` lines (start-up hooks) are not run.
purelib=$("$venv/bin/python" -c 'import sys, sysconfig; print(sysconfig.get_paths()["purelib"] if sys.prefix != sys.base_prefix else "")')
if [ -z "$purelib" ]; then  # never write into PYTHON's own folders
    echo "nsightwrap: $venv/bin/python does not run in the virtual environment just made" >&2
    exit 1
fi
mkdir -p "$purelib"
"$python" -c 'import glob, os, site
folders = ([site.getusersitepackages()] if site.ENABLE_USER_SITE else []) + site.getsitepackages()
seen = []
for folder in folders:
    if not os.path.isdir(folder) or folder in seen:
        continue
    seen.append(folder)
    for pth in sorted(glob.glob(os.path.join(folder, "*.pth"))):
        try:
            lines = open(pth, encoding="utf-8").read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            line = line.strip()
            path = os.path.join(folder, line)
            if line and not line.startswith(("#", "import ", "import\t")) and os.path.isdir(path) and path not in seen:
                seen.append(path)
print("\n".join(seen))' >"$purelib/_nsightwrap_python_packages.pth"
echo "$want" >"$marker"
trap - EXIT INT TERM
