"""`etnp completion bash|zsh`: the scripts parse (`bash -n`, `zsh -n` when zsh is installed) and offer every
command and every option of every command, as each command's `--help` lists them, so the two cannot drift."""
import re
import shutil
import subprocess

import pytest

from cli_util import etnp_run


def commands(etnp):
    """The commands of `etnp --help`: the lines after "commands:" up to the first blank one."""
    text = etnp_run(etnp, "--help").stdout
    block = text.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in block.splitlines()]


def help_flags(etnp, command):
    """Every --flag of `etnp COMMAND --help`: those of the synopsis and of the option lines."""
    lines = etnp_run(etnp, command, "--help").stdout.splitlines()
    flags = []
    for i, line in enumerate(lines):
        if i == 0 or (i < 4 and line.lstrip().startswith("[") and line.startswith("    ")):
            found = re.findall(r"--[a-z][a-z0-9-]*", line)
        elif line.startswith("  --"):
            found = re.findall(r"--[a-z][a-z0-9-]*", line.split()[0])
        else:
            continue
        flags += [f for f in found if f not in flags]
    return flags + ["--help"]


def test_the_command_list(etnp):
    assert commands(etnp) == ["inspect", "run", "check", "bench", "generate", "completion", "version"]


def test_bash_script_parses(etnp, tmp_path):
    out = etnp_run(etnp, "completion", "bash")
    assert out.returncode == 0 and out.stderr == ""
    script = tmp_path / "etnp.bash"
    script.write_text(out.stdout)
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_bash_script_has_every_command_and_flag(etnp):
    script = etnp_run(etnp, "completion", "bash").stdout
    listed = re.search(r'local commands="([^"]*)"', script).group(1).split()
    assert listed == commands(etnp)
    assert help_flags(etnp, "completion") == ["--help"]
    for command in commands(etnp):
        match = re.search(r"^    %s\) flags=\"([^\"]*)\" ;;$" % command, script, re.M)
        assert match, command
        assert match.group(1).split() == help_flags(etnp, command), command
    # Files for FILE, --data, --input, --expect and --tokenizer; directories for --output-dir and --batch.
    assert re.search(r"^    --data\|--input\|--tokenizer\|--expect\) COMPREPLY=\( \$\(compgen -f ", script, re.M)
    assert re.search(r"^    --output-dir\|--batch\) COMPREPLY=\( \$\(compgen -d ", script, re.M)
    assert "complete -o filenames -o bashdefault -F _etnp etnp" in script


def test_bash_completes_in_a_shell(etnp, tmp_path):
    """Sources the script and asks it, as bash would on TAB."""
    script = tmp_path / "etnp.bash"
    script.write_text(etnp_run(etnp, "completion", "bash").stdout)

    def complete(*words):
        line = " ".join("'%s'" % w for w in words)
        program = ('source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _etnp; printf "%%s\\n" "${COMPREPLY[@]}"'
                   % (script, line, len(words) - 1))
        return subprocess.run(["bash", "-c", program], capture_output=True, text=True, cwd=tmp_path).stdout.split()

    assert complete("etnp", "ch") == ["check"]
    assert complete("etnp", "check", "--e") == ["--expect"]
    assert complete("etnp", "run", "--fill", "") == ["ones", "zeros", "random"]
    assert complete("etnp", "completion", "") == ["bash", "zsh"]
    (tmp_path / "model.pte").write_text("")
    assert "model.pte" in complete("etnp", "run", "mod")


def test_zsh_script(etnp, tmp_path):
    out = etnp_run(etnp, "completion", "zsh")
    assert out.returncode == 0 and out.stdout.startswith("#compdef etnp\n")
    for command in commands(etnp):
        assert "    '%s:" % command in out.stdout
        if command != "completion":
            block = out.stdout.split("\n    %s)\n" % command, 1)[1].split("\n      ;;", 1)[0]
            specs = re.findall(r"^        '\*?(--[a-z][a-z0-9-]*)", block, re.M)
            assert specs == help_flags(etnp, command), command
    if shutil.which("zsh") is None:
        pytest.skip("zsh not installed: the zsh script's syntax is not checked")
    script = tmp_path / "_etnp"
    script.write_text(out.stdout)
    check = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_completion_needs_a_known_shell(etnp):
    for args in ([], ["fish"], ["bash", "zsh"]):
        out = etnp_run(etnp, "completion", *args)
        assert out.returncode == 2 and out.stderr == "error: InvalidArgument: completion takes one shell: bash or zsh\n"
