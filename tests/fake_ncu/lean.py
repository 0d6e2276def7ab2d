"""What the fakes use of shutil and tempfile, without importing them: a fake runs with `python -S` about 1,000
times a suite, and those modules (with random, fnmatch, their own imports) cost a few ms of CPU each start
(tests/README.md). Used by the fake ncu's front end (ncufront.py) and the fake torchrun/mpirun
(tests/fake_dist/launcher.py, which puts this folder on its path). Standard library only."""

import os


def literal(text):
    """A value that repr() wrote (the fake ncu's session, its state files): Python literals only, written by the
    fakes."""
    return eval(text, {"__builtins__": {}}, {})


def which(cmd):
    """shutil.which(cmd)."""
    def runnable(path):
        return os.path.exists(path) and os.access(path, os.X_OK) and not os.path.isdir(path)

    if os.path.dirname(cmd):
        return cmd if runnable(cmd) else None
    for folder in (os.environ.get("PATH") or os.defpath).split(os.pathsep):
        path = os.path.join(folder, cmd)
        if runnable(path):
            return path
    return None


def copyfile(src, dst):
    """shutil.copyfile(src, dst), for the small files the fakes copy (reports)."""
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data)


def make_folder(prefix):
    """tempfile.mkdtemp(prefix=prefix): in $TMPDIR (else $TEMP, $TMP, /tmp), mode 0700, named PREFIX-PID-N."""
    base = next((os.environ[v] for v in ("TMPDIR", "TEMP", "TMP") if os.environ.get(v)), "/tmp")
    for n in range(1000):
        path = os.path.join(os.path.abspath(base), f"{prefix}{os.getpid()}-{n}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:  # left by a fake killed before it cleaned up, with this pid
            continue
    raise FileExistsError(path)


def remove_folder(path):
    """shutil.rmtree(path, ignore_errors=True) for a folder of files (the fakes' state and meeting folders); safe in
    a signal handler (no import, no lock)."""
    try:
        names = os.listdir(path)
    except OSError:
        return
    for name in names:
        try:
            os.unlink(os.path.join(path, name))
        except OSError:
            pass
    try:
        os.rmdir(path)
    except OSError:
        pass
