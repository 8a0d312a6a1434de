import os
import uuid

import pytest

import carmy
from helpers import Carmyd


@pytest.fixture(scope="module")
def carmyd():
    d = Carmyd().start()
    yield d
    rc = d.stop()
    d.cleanup()
    assert rc == 0, "carmyd exited with %s" % rc


@pytest.fixture
def session():
    """A session of this test's own, so that request ids never meet."""
    return "sess-" + uuid.uuid4().hex


@pytest.fixture
def client(carmyd, session):
    c = carmy.connect(carmyd.socket, principal="user-42", session=session)
    yield c
    c.close()


@pytest.fixture
def marker(tmp_path):
    """A file the tool bodies append a line to each time they run."""
    return os.path.join(str(tmp_path), "ran")
