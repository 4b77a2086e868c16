"""The headline command, rehearsed: ``gestalt models fetch recipes/full.yaml`` against a local hub
serving stand-ins of every hub model at the recipe's pinned commits, then ``gestalt recipe
recipes/full.yaml`` offline (``HF_HUB_OFFLINE=1``) with small task sizes, the two API models
answered by the fake vendor server, tracking to a local store, and ``gestalt report``.

Every full.yaml loader, processor and chat template runs here through its real hub client path,
so a change in a loader, in transformers or in timm that breaks one fails a test naming the model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import hub_standins
from tests.conftest import MIRROR, REPO
from tests.fake_vendor_server import FakeVendorServer
from tests.local_hub import local_hub

# the fixture fetches and runs all 13 models: about 6 min on 2 idle cores, over 15 min under load
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3 * 1800)]

KEYS = {"OPENAI_API_KEY": "sk-rehearsal-openai-0123456789", "ANTHROPIC_API_KEY": "sk-ant-rehearsal-0123456789"}
SMALL = ["--runtime.device=cpu", "--runtime.progress=false", "--bootstrap.n_boot=100", "--bootstrap.n_boot_kappa=100",
         "--task_options.similarity.chart.series_count.n_test=6",
         "--task_options.similarity.chart.series_count.n_train=20"]  # the ridge probe's 5 folds need 20


def _gestalt(*args: str, env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _requests(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(scope="session")
def hub_root(tmp_path_factory) -> Path:
    """The stand-ins, built once per session."""
    root = tmp_path_factory.mktemp("hub")
    hub_standins.build(root)
    return root


@pytest.fixture(scope="module")
def rehearsal(hub_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("rehearsal")
    log, hf_home = work / "hub-requests.log", work / "hf-home"
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("HF_", "TRANSFORMERS_", "MLFLOW_", "OPENAI_", "ANTHROPIC_"))}
    with local_hub(hub_root, log) as url:
        online = dict(base, HF_ENDPOINT=url, HF_HOME=str(hf_home), HF_HUB_DISABLE_TELEMETRY="1")
        fetch = _gestalt("models", "fetch", "recipes/full.yaml", env=online)
        assert fetch.returncode == 0, f"gestalt models fetch failed:\n{fetch.stdout}\n{fetch.stderr[-4000:]}"
        fetched = len(_requests(log))
        with FakeVendorServer(answer=lambda prompt: hub_standins.ANSWER) as vendor:
            offline = dict(online, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", OPENAI_BASE_URL=vendor.url + "/v1",
                           ANTHROPIC_BASE_URL=vendor.url, **KEYS)
            run = _gestalt("recipe", "recipes/full.yaml", f"--output_dir={work / 'out'}",
                           f"--tracking.uri=sqlite:///{work / 'mlflow.db'}", f"--data.mirror={MIRROR}", *SMALL,
                           env=offline)
            vendor_calls = len(vendor.requests)
        sent_offline = _requests(log)[fetched:]
    report = _gestalt("report", "--experiment=gestalt", f"--out={work / 'report'}",
                      f"--uri=sqlite:///{work / 'mlflow.db'}", env=dict(base, HF_HUB_OFFLINE="1"))
    return {"work": work, "hf_home": hf_home, "fetch": fetch, "run": run, "report": report,
            "sent_offline": sent_offline, "vendor_calls": vendor_calls}


def test_fetch_puts_every_hub_model_at_its_pinned_commit(rehearsal):
    recipe = {m.id: m for m in hub_standins.load_recipe(hub_standins.FULL).models}
    missing = []
    for model_id, (_, _, repo) in hub_standins.hub_models().items():
        snapshot = (rehearsal["hf_home"] / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots"
                    / str(recipe[model_id].revision))
        if not any(snapshot.glob("*.safetensors")):
            missing.append(f"{model_id}: no weights in {snapshot}")
    assert missing == []
    assert len(hub_standins.hub_models()) == 11


def test_the_offline_run_finishes_and_asks_the_hub_nothing(rehearsal):
    run = rehearsal["run"]
    assert run.returncode == 0, f"gestalt recipe full.yaml exited {run.returncode}:\n{run.stdout[-4000:]}\n" \
                                f"{run.stderr[-6000:]}"
    assert rehearsal["sent_offline"] == []
    assert rehearsal["vendor_calls"] > 0  # both API models were prompted


def test_every_battery_is_a_finished_mlflow_run_with_scores(rehearsal):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{rehearsal['work'] / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("gestalt")
    assert experiment is not None, rehearsal["run"].stderr[-4000:]
    runs = client.search_runs([experiment.experiment_id])
    batteries = {r.info.run_name: r for r in runs if r.data.tags.get("gestalt.model")}
    models = [m.id for m in hub_standins.load_recipe(hub_standins.FULL).models]
    assert sorted(batteries) == sorted(models)
    problems = [f"{name}: {r.info.status}" for name, r in batteries.items() if r.info.status != "FINISHED"]
    problems += [f"{name}: no scores" for name, r in batteries.items() if not r.data.metrics]
    assert problems == []
    assert any("gestalt.summary" in r.data.tags for r in runs), "no summary run"


def test_each_open_vlm_was_prompted_in_its_chat_format_and_its_answer_parsed(rehearsal):
    """The stand-ins answer ANSWER only when their own chat template, processor and tokenizer
    worked: any other output, or an unparsed one, names the model and task."""
    out = rehearsal["work"] / "out"
    problems = []
    for model_id, (source, _, _) in hub_standins.hub_models().items():
        if source != "hf-vlm":
            continue
        files = sorted((out / model_id / "records").glob("*.jsonl"))
        if not files:
            problems.append(f"{model_id}: no records")
        for path in files:
            records = [json.loads(line) for line in path.read_text().splitlines()]
            bad = [r for r in records if r.get("raw_output") != hub_standins.ANSWER or r.get("parse_status") != "ok"]
            if not records or bad:
                problems.append(f"{model_id} {path.stem}: {len(bad)} of {len(records)} records off, e.g. "
                                f"{bad[0].get('raw_output')!r} {bad[0].get('parse_status')} {bad[0].get('error')}"
                                if bad else f"{model_id} {path.stem}: no records")
    assert problems == []


def test_the_report_is_written(rehearsal):
    report = rehearsal["report"]
    assert report.returncode == 0, f"gestalt report failed:\n{report.stdout}\n{report.stderr[-4000:]}"
    written = [Path(line) for line in report.stdout.splitlines() if line.strip()]
    assert written and all(p.exists() for p in written)
    assert any(p.suffix == ".html" for p in (rehearsal["work"] / "report").rglob("*"))


def test_each_fetched_open_vlm_puts_the_image_before_the_prompt(rehearsal):
    """The answers above come from a biased generation config, so they do not show the order of
    the turn: the fetched snapshot's own processor and chat template must render the image first."""
    from PIL import Image
    from transformers import AutoProcessor

    from harness.models.hf_vlm import chat

    recipe = {m.id: m for m in hub_standins.load_recipe(hub_standins.FULL).models}
    problems = []
    for model_id, (source, _, repo) in hub_standins.hub_models().items():
        if source != "hf-vlm":
            continue
        snapshot = (rehearsal["hf_home"] / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots"
                    / str(recipe[model_id].revision))
        processor = AutoProcessor.from_pretrained(snapshot)
        text = processor.apply_chat_template(chat("PROMPT_TEXT", Image.new("RGB", (32, 32))),
                                             add_generation_prompt=True)
        if not (0 <= text.find(processor.image_token) < text.find("PROMPT_TEXT")):
            problems.append(f"{model_id}: {text!r}")
    assert problems == []
