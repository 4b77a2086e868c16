"""Sources: a verified mirror, and changed or missing files named in the error."""

import shutil

import pytest

from harness.sources import RELEASES, DataError, Sources


def _copy_release(tmp_path, name):
    from tests.conftest import MIRROR

    dst = tmp_path / "mirror" / name
    shutil.copytree(MIRROR / name, dst)
    return tmp_path / "mirror"


def test_every_declared_release_has_url_licence_and_hashes():
    for rel in RELEASES.values():
        assert rel.licence and rel.citation, rel.name
        for path, digest in rel.files.items():
            assert len(digest) == 64, (rel.name, path)


def test_geirhos_release_verifies_and_has_public_urls(sources):
    assert sources.verify("geirhos-silhouettes") == 176
    rel = RELEASES["geirhos-silhouettes"]
    url = rel.url("stimuli/filled-silhouettes/boat/boat5.png")
    assert url.startswith("https://raw.githubusercontent.com/rgeirhos/texture-vs-shape/ccd0c01d")
    assert url.endswith("/stimuli/filled-silhouettes/boat/boat5.png")


def test_tampered_file_is_named(tmp_path):
    mirror = _copy_release(tmp_path, "geirhos-silhouettes")
    target = mirror / "geirhos-silhouettes/stimuli/filled-silhouettes/cat/cat7.png"
    data = bytearray(target.read_bytes())
    data[-20] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"cat/cat7\.png: sha256 differs"):
        Sources(mirror=mirror).verify("geirhos-silhouettes")


def test_missing_file_is_named_and_nothing_is_read(tmp_path):
    mirror = _copy_release(tmp_path, "geirhos-silhouettes")
    (mirror / "geirhos-silhouettes/raw-data/silhouette-filled-experiment/"
              "silhouette-filled-experiment_subject-04_session_1.csv").unlink()
    src = Sources(mirror=mirror)
    with pytest.raises(DataError, match="subject-04_session_1.csv: missing"):
        src.path("geirhos-silhouettes", "stimuli/filled-silhouettes/cat/cat7.png")


def test_undeclared_path_and_unknown_release(sources):
    with pytest.raises(DataError, match="not a declared file"):
        sources.path("geirhos-silhouettes", "stimuli/evil.png")
    with pytest.raises(DataError, match="unknown release"):
        sources.verify("no-such-release")


def test_pull_from_mirror_into_a_data_root_then_verify(tmp_path, sources):
    root = tmp_path / "root"
    fetched = Sources(root=root, mirror=sources.mirror).pull("geirhos-silhouettes", progress=False)
    assert fetched == 176
    assert Sources(root=root).verify("geirhos-silhouettes") == 176
    # a second pull finds everything in place
    assert Sources(root=root, mirror=sources.mirror).pull("geirhos-silhouettes", progress=False) == 0
