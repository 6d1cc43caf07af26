"""Running the etnp binary in the CLI tests."""
import subprocess


def etnp_run(etnp, *args, cwd=None):
    """`etnp ARGS...` (each argument str()-ed), its output captured as text."""
    return subprocess.run([etnp, *map(str, args)], capture_output=True, text=True, cwd=cwd)


def error_line(out, code):
    """The one line a failed command writes to stderr, after checking its exit status is `code`."""
    assert out.returncode == code, (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]
