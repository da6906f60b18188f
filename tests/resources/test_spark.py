import os
import stat

import pytest

from resources.spark import JavaNotFoundError, ensure_java


def fake_java(folder, version: str):
    """A real executable answering `java -version` like an old JDK does."""
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-14' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return folder


def test_a_too_old_java_is_refused_with_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path / "jdk11", "11.0.2")))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(JavaNotFoundError, match=r"Java 11\).*apt-get install openjdk-17"):
        ensure_java()


def test_java_17_is_accepted_and_exported(tmp_path, monkeypatch):
    home = fake_java(tmp_path / "jdk17", "17.0.9")
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert ensure_java() == str(home)
    assert os.environ["JAVA_HOME"] == str(home)
