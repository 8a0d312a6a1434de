"""Operator functions: carmyctl's commands from Python.

Each runs ``carmyctl --json COMMAND`` (the operator's tool, installed with
libcarmy) and gives its answer as Python values, or raises what it said
as a CarmyError. carmyctl reads carmyd's table and asks carmyd, which
records who asked (uid and pid) and when; the changing commands (resolve,
release, forget, purge) are for carmyd's own user, root and carmyd's
--admin-group, as on the command line.

The program is $CARMYCTL if set, else ``carmyctl`` on $PATH.
"""
import json
import os
import re
import shutil
import subprocess

# "carmyctl: [WHAT: ]CODE: text" on standard error.
_CODE = re.compile(r"^carmyctl: (?:[a-z-]+: )?([A-Z][A-Z_]+): (.*)$")
_EXIT_USAGE = 64
_EXIT_UNAVAILABLE = 69


def _program():
    path = os.environ.get("CARMYCTL") or shutil.which("carmyctl")
    if not path:
        raise FileNotFoundError("carmyctl is not on $PATH (it is installed "
                                "with carmyd; or set $CARMYCTL)")
    return path


def _fail(proc, make_error, execution_id):
    err = proc.stderr.decode(errors="replace").strip()
    if proc.returncode == _EXIT_USAGE:
        raise ValueError(err)
    for line in err.splitlines():
        m = _CODE.match(line)
        if m:
            raise make_error(m.group(1), m.group(2), execution_id, None)
    name = ("DAEMON_UNAVAILABLE" if proc.returncode == _EXIT_UNAVAILABLE
            else "CARMYCTL_FAILED")
    raise make_error(name, err or "carmyctl exited with %d"
                     % proc.returncode, execution_id, None)


def run(make_error, socket, args, execution_id=None, stdin=None):
    """carmyctl's JSON answer to args (a list of str or bytes), given
    stdin (bytes) on its standard input, or the error it said, made by
    make_error(code, message, execution_id, state)."""
    argv = [_program()]
    if socket is not None:
        argv += ["--socket", os.fsdecode(socket)]
    proc = subprocess.run(argv + ["--json"] + args, input=stdin or b"",
                          capture_output=True, check=False)
    if proc.returncode != 0:
        _fail(proc, make_error, execution_id)
    return json.loads(proc.stdout)
