"""A result folder never writes outside itself through a link: folders travel as tar and zip
files, which keep links. A link planted where a run or `gestalt report` writes a file of its own
(``.battery.id``, MLflow's artifacts, the store, the report's pages, tables and figures) is
refused in one line naming it; the file it points at stays as it was, and the link stays, for the
user to remove (docs/reliability.md). The record store's own files: tests/test_record_links.py."""

import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.own_files import LinkInFolder, own_file, write_own
from tests.test_result_folder import RECORDS, RECIPE, drop_records, rerun, run

OUTSIDE = "a file outside the result folder\n"
EXPERIMENT = RECIPE["tracking"]["experiment"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Folder A after one run of the recipe in it, and the stimulus-hash memo's folder."""
    import yaml

    tmp = tmp_path_factory.mktemp("linked")
    a = tmp / "A"
    a.mkdir()
    (a / "recipe.yaml").write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    rerun(a, tmp / "cache")
    return a, tmp / "cache"


def planted(folder: Path, name: str, tmp_path: Path) -> tuple[Path, Path]:
    """A link at ``folder/name`` to a file outside ``folder``: (the link, the outside file)."""
    outside = tmp_path / f"outside-{Path(name).name}"
    outside.write_text(OUTSIDE)
    link = folder / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(outside)
    return link, outside


def refused_in_one_line(err: str, link: Path, outside: Path, folder: Path) -> None:
    """``err`` (stderr) ends with one line naming ``link`` (as the run names it: from the result
    ``folder`` down, or whole) and what it points at; nothing was written through it."""
    line = err.strip().splitlines()[-1]
    assert "Traceback" not in err and str(link.relative_to(folder)) in line and str(outside) in line, err[-3000:]
    assert outside.read_text() == OUTSIDE
    assert link.is_symlink()


def copy(finished, tmp_path: Path) -> Path:
    b = tmp_path / "B"
    shutil.copytree(finished[0], b, symlinks=True)
    return b


def battery_run(folder: Path) -> Path:
    """The artifact folder of the battery's MLflow run (the one that holds its records)."""
    (found,) = [p.parent.parent for p in (folder / "mlartifacts").glob("*/artifacts/records")]
    return found / "artifacts"


@pytest.mark.slow
@pytest.mark.parametrize("artifact", [f"records/{RECORDS.name}", "figures/closure.nat.silhouette.confusion.png"])
def test_an_artifact_that_is_a_link_is_refused_and_a_rerun_without_it_finishes(finished, tmp_path, artifact):
    """MLflow copies a run's artifacts into ``mlartifacts`` following links; a rerun continues the
    battery's run, whose artifact paths a folder from elsewhere can hold links at."""
    b = copy(finished, tmp_path)
    link, outside = planted(battery_run(b), artifact, tmp_path)
    drop_records(b)
    res = run(b, finished[1], "--rescore")
    assert res.returncode == 2, res.stderr[-3000:]
    refused_in_one_line(res.stderr, link, outside, b)
    link.unlink()
    rerun(b, finished[1], "--rescore")
    assert (battery_run(b) / artifact).is_file() and not link.is_symlink()
    assert outside.read_text() == OUTSIDE


@pytest.mark.slow
def test_a_battery_id_that_is_a_link_is_refused(finished, tmp_path):
    b = copy(finished, tmp_path)
    link, outside = planted(b / RECORDS.parent.parent, ".battery.id", tmp_path)
    drop_records(b)  # a battery to run: an up-to-date one reads no id
    res = run(b, finished[1], "--rescore")
    assert res.returncode == 2, res.stderr[-3000:]
    refused_in_one_line(res.stderr, link, outside, b)


@pytest.mark.slow
def test_a_store_that_is_a_link_is_refused(finished, tmp_path, monkeypatch, capsys):
    """sqlite writes through a link at ``mlflow.db``: the summary run a report logs would land in
    the store it points at."""
    b = copy(finished, tmp_path)
    elsewhere = tmp_path / "elsewhere.db"
    shutil.move(b / "mlflow.db", elsewhere)
    (b / "mlflow.db").symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    code, err = report(b, tmp_path / "report", monkeypatch, capsys)
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert str(b / "mlflow.db") in line and str(elsewhere) in line, line
    assert elsewhere.read_bytes() == before


def report(folder: Path, out: Path, monkeypatch, capsys) -> tuple[int, str]:
    """`gestalt report --out OUT` in ``folder``: (exit status, stderr). The store is named by its
    absolute path: MLflow keeps one engine per address for the process, and ``sqlite:///mlflow.db``
    would reach the folder of an earlier test."""
    monkeypatch.chdir(folder)
    capsys.readouterr()
    try:
        main(["report", "--experiment", EXPERIMENT, "--out", str(out), "--uri", f"sqlite:///{folder}/mlflow.db"])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.slow
def test_every_file_a_report_writes_refuses_a_link(finished, tmp_path, monkeypatch, capsys):
    """Each file `gestalt report --out out/report` writes (pages, tables, figures, runs.json) in
    turn a link: refused, the rest of the folder as it was."""
    b = copy(finished, tmp_path)
    code, err = report(b, b / "out" / "report", monkeypatch, capsys)
    assert code == 0, err
    names = sorted(str(p.relative_to(b / "out" / "report")) for p in (b / "out" / "report").rglob("*") if p.is_file())
    assert {"index.html", "scores.csv", "runs.json", "matrix.png", "scorecards/alexnet.html"} <= set(names), names
    for k, name in enumerate(names):
        out = b / "out" / f"report-{k}"
        link, outside = planted(out, name, tmp_path)
        code, err = report(b, out, monkeypatch, capsys)
        assert code == 2, (name, err)
        refused_in_one_line(err, link, outside, b)


@pytest.mark.slow
def test_a_summary_artifact_that_is_a_link_is_refused(finished, tmp_path, monkeypatch, capsys):
    """The experiment's summary run is drawn again into the same run when its batteries changed:
    its artifacts' paths are known in advance."""
    from mlflow import MlflowClient

    from harness.tracking.batteries import SUMMARY_FINGERPRINT, SUMMARY_TAG

    b = copy(finished, tmp_path)
    client = MlflowClient(f"sqlite:///{b}/mlflow.db")
    (summary,) = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id],
                                    f"tags.`{SUMMARY_TAG}` = 'true'")
    client.delete_tag(summary.info.run_id, SUMMARY_FINGERPRINT)  # drawn again by the next report
    link, outside = planted(b / "mlartifacts" / summary.info.run_id / "artifacts", "runs.json", tmp_path)
    code, err = report(b, tmp_path / "report", monkeypatch, capsys)
    assert code == 2, err
    refused_in_one_line(err, link, outside, b)


def test_a_file_written_whole_refuses_a_link_and_leaves_no_scratch(tmp_path):
    folder = tmp_path / "folder"
    link, outside = planted(folder, "page.html", tmp_path)
    with pytest.raises(LinkInFolder) as e:
        write_own(link, "new")
    assert str(link) in str(e.value) and "\n" not in str(e.value)
    assert outside.read_text() == OUTSIDE and link.is_symlink()
    own = folder / "own.csv"
    with pytest.raises(RuntimeError), own_file(own) as f:
        f.write("half")
        raise RuntimeError("stopped while writing")
    write_own(folder / "table.csv", "whole\n")
    assert sorted(p.name for p in folder.iterdir()) == ["page.html", "table.csv"]
    assert (folder / "table.csv").read_text() == "whole\n"


def test_probe_embeddings_refuse_a_link(tmp_path):
    """Kept beside a task's records: a link there is refused, not the cache silently skipped."""
    import numpy as np

    from harness.readouts.base import EmbeddingCache

    link, outside = planted(tmp_path / "records", "t.probe-train.npz", tmp_path)
    with pytest.raises(LinkInFolder):
        EmbeddingCache(link, "fingerprint").save({"k": np.zeros(2)})
    assert outside.read_text() == OUTSIDE


@pytest.mark.slow
def test_a_ui_address_that_is_a_link_is_refused_before_a_server_starts(finished, tmp_path, monkeypatch, capsys):
    """`gestalt ui` notes the address it serves on beside the store (``mlflow.db.ui``)."""
    b = copy(finished, tmp_path)
    link, outside = planted(b, "mlflow.db.ui", tmp_path)
    monkeypatch.chdir(b)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["ui", "--uri", f"sqlite:///{b}/mlflow.db", "--port", "1", "--experiment", EXPERIMENT])
    assert e.value.code == 2
    refused_in_one_line(capsys.readouterr().err, link, outside, b)
