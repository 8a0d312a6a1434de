"""Helpers for the carmy binding's tests: a real carmyd per fixture, and
waits on events (a ready line, a file gaining lines) with deadlines."""
import os
import select
import signal
import subprocess
import tempfile
import time

# How long any wait for an event may take before the test fails.
WAIT_S = 30.0
_seq = [0]


class Carmyd:
    """A carmyd of this build (--foreground --transient) with a socket
    directory of its own."""

    def __init__(self, *extra):
        self.extra = list(extra)
        self.dir = tempfile.mkdtemp(prefix="carmy-pytest.")
        self.socket = os.path.join(self.dir, "carmyd.sock")
        _seq[0] += 1
        self.segment = "/carmy-pytest.%d.%d" % (os.getpid(), _seq[0])
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [os.environ["CARMYD"], "--foreground", "--transient",
             "--socket", self.socket, "--segment", self.segment,
             "--log-level", "warn"] + self.extra,
            stdout=subprocess.PIPE)
        wait_line(self.proc.stdout, b"carmyd ready")
        return self

    def stop(self):
        """SIGTERM, and carmyd's exit status (None if it was not
        running)."""
        rc = None
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
            rc = self.proc.returncode
            self.proc = None
        return rc

    def kill(self):
        """SIGKILL, as a crash: the segment stays for the next start."""
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc = None

    def cleanup(self):
        self.stop()
        # Left by a kill() not followed by a start() (a test that failed
        # in between): a --transient carmyd removes it when it stops.
        try:
            os.unlink("/dev/shm" + self.segment)
        except FileNotFoundError:
            pass
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


def wait_line(stream, needle):
    """Read stream until a line holding needle, within WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    fd = stream.fileno()
    buf = b""
    while needle not in buf or not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise AssertionError("no %r within %ss" % (needle, WAIT_S))
        chunk = os.read(fd, 512)
        if not chunk:
            raise AssertionError("stream closed before %r" % (needle,))
        buf += chunk
    return buf


def lines(path):
    """The lines of path, [] if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def append(path, text):
    """One line appended with O_APPEND (one write, atomic between
    processes)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, text.encode() + b"\n")
    finally:
        os.close(fd)


def wait_for(pred, what):
    """Poll pred until true, within WAIT_S: for conditions that have no
    event to block on (another process's file)."""
    deadline = time.monotonic() + WAIT_S
    delay = 0.0005
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
