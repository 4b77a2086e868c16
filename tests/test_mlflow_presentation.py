"""What a battery run looks like in MLflow: short headline names that stay distinct when the UI
truncates them, values rounded to what their interval justifies, the experiment opening on the
runs table, and records whose lines start with the trial's identity, response and correctness."""

import contextlib
import json

import pytest


def test_each_family_names_its_headline_short_and_distinct_and_sorted_first():
    """The runs table's column per task comes from the task's scoring family (no table keyed by
    task ids): short, distinct within the dozen characters a header shows, capitalised so that
    MLflow's Compare (sorted by code point) lists the headlines before every ``<task>/...``."""
    from harness.scores.tasks import FAMILIES, family_of
    from harness.stimuli.registry import TASKS

    names = {}
    for task_id, spec in TASKS.items():
        family = FAMILIES[spec.scoring]
        names[task_id] = family.short_name(task_id, family.lead_name)
    assert len({n[:12] for n in names.values()}) == len(names)
    assert all(n[0].isupper() for n in names.values())
    assert sorted([*names.values(), *(f"{t}/n" for t in TASKS)])[:len(names)] == sorted(names.values())
    assert names["closure.nat.silhouette"] == "Silhouette.B"
    assert names["similarity.chart.series_count"] == "Series_count.capacity"  # its headline: not an accuracy
    assert family_of("ratio.chart.grape_type1").short_name("ratio.chart.grape_type1:step_c", "mlae") == \
        "Grape_type1.mlae:step_c"


def test_a_run_logs_the_headline_with_its_interval_and_few_other_metrics(tmp_path):
    """Per task the headline (the matrix's number) with its interval, n, null rate and the
    family's few secondary scores where the battery leaves room; its floor and ceiling as params
    (the same for every model); every other score stays in intervals.json."""
    from mlflow import MlflowClient

    from harness.tracking.metrics import plan_metrics
    from tests.test_reports import SERIES, SIL, log_battery_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id, scores = log_battery_run(uri, "few", "m", "supervised", 0.5, tmp_path=tmp_path)
    run = MlflowClient(uri).get_run(run_id)
    metrics, params = run.data.metrics, run.data.params
    assert set(metrics) <= set(plan_metrics(list(scores)).names()), sorted(metrics)
    b = next(s for s in scores[SIL] if s.name == "B")
    assert metrics["Silhouette.B"] == round(b.value, 2)
    assert metrics["Silhouette.B_ci_lower"] == round(b.ci_low, 2)
    assert metrics["Silhouette.B_ci_upper"] == round(b.ci_high, 2)
    assert float(params["Silhouette.B_floor"]) == round(b.floor, 4) and params["Silhouette.B_ceiling"] == "0.71"
    assert {"Mark_color.B", "Series_count.capacity", f"{SIL}/n", f"{SIL}/null_rate", f"{SIL}/kappa",
            f"{SERIES}/accuracy"} <= set(metrics)
    assert not any("a_k" in k or k.startswith(f"{SIL}/B") for k in metrics)  # in intervals.json only


def _shipped_batteries():
    """(name, tasks, totals) of every registered battery, with and without an API model's
    totals, and of every model of every shipped recipe (its share of the tasks)."""
    from harness.models.api_costs import USAGE_METRICS
    from harness.recipes import load_recipe
    from harness.run import battery_totals, plan
    from harness.shipped import shipped_dir
    from harness.stimuli.registry import BATTERIES
    from harness.tracking.metrics import RUN_TOTALS

    for name, tasks in BATTERIES.items():
        yield name, tasks, RUN_TOTALS
        yield f"{name} (API model)", tasks, RUN_TOTALS + USAGE_METRICS
    for path in sorted(shipped_dir().glob("*.yaml")):
        for p in plan(load_recipe(path)):
            yield f"{path.name} {p.model.id}", [t.task_id for t, _ in p.tasks], battery_totals(p)


def test_every_battery_logs_at_most_40_metrics_headlines_first():
    """Whatever the battery (CHART-6's six tasks, the bar charts' ten, a recipe's eleven
    variants), a run's metric names are at most 40: every task's headline, the run's totals,
    then intervals, counts and secondary scores for every task or none while they fit. The
    headlines sort first (MLflow's Compare and runs table sort by name), each interval's lower
    bound before its upper one."""
    from harness.models.api_costs import USAGE_METRICS
    from harness.tracking.metrics import MAX_RUN_METRICS, RUN_TOTALS, plan_metrics

    seen = set()
    for name, tasks, totals in _shipped_batteries():
        plan = plan_metrics(tasks, totals)
        names = plan.names()
        assert len(names) <= MAX_RUN_METRICS, (name, len(names), names)
        assert len(set(names)) == len(names), name
        headlines = [n for n in names if "/" not in n and n not in totals]
        assert len([n for n in headlines if "_ci_" not in n]) == len(tasks), name
        assert sorted(names)[:len(headlines)] == sorted(headlines), name
        order = sorted(names)
        for h in (n for n in headlines if "_ci_" not in n and "interval" in plan.kinds):
            assert order.index(h) < order.index(h + "_ci_lower") < order.index(h + "_ci_upper"), name
        seen.add(len(tasks))
    assert {6, 10, 11} <= seen  # CHART-6, the bar charts, a recipe of variants
    # every model of a battery logs the same kinds, an API model (three totals more) too
    thirteen = [f"ratio.chart.grape_type1:v{i}" for i in range(13)]  # 13 x 3 + 1 = 40 without that room
    assert plan_metrics(thirteen).kinds == plan_metrics(thirteen, RUN_TOTALS + USAGE_METRICS).kinds == set()
    # the intervals stay when the battery is large; secondary scores go first
    bars = plan_metrics([f"ratio.chart.grape_type1:v{i}" for i in range(11)])
    assert "interval" in bars.kinds and "secondary" not in bars.kinds
    # past the cap the headlines of the first tasks only
    many = plan_metrics([f"ratio.chart.grape_type1:v{i}" for i in range(50)])
    assert many.headlines == MAX_RUN_METRICS - len(RUN_TOTALS + USAGE_METRICS) and len(many.names()) < 40


def test_training_curves_take_only_the_room_left(tmp_path):
    """A trained model's curves are always a table, and metric histories only where the run has
    room for them: ten trained tasks log their headlines and intervals, not 30 curves more."""
    from mlflow import MlflowClient

    from harness.stimuli.registry import BATTERIES
    from harness.tracking.mlflow_run import BatteryRun

    tasks = BATTERIES["bars"]
    fold = [{"epoch": e, "train_loss": 1.0 / e, "val_loss": 2.0 / e, "seconds": 0.5} for e in range(1, 4)]
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with BatteryRun(uri=uri, experiment="curves", run_name="m", tags={}, tasks=tasks) as run:
        for task in tasks:
            run.log_training(task, [fold], {})
        run.log_metrics({"model_calls": 0.0})
    client = MlflowClient(uri)
    logged = client.get_run(run.run_id).data
    assert 0 < len(logged.metrics) <= 40 and f"{tasks[0]}/train/val_loss" in logged.metrics
    assert f"{tasks[-1]}/train/val_loss" not in logged.metrics
    table = json.loads(open(client.download_artifacts(
        run.run_id, f"tables/{tasks[-1]}.training.json", str(tmp_path / "t"))).read())
    assert table["columns"] == ["fold", "epoch", "train_loss", "val_loss", "seconds"] and len(table["data"]) == 3


def test_values_are_rounded_to_their_interval():
    from harness.scores.record import Score
    from harness.scores.tasks import family_of
    from harness.tracking.metrics import anchor_params, score_metrics

    sil = family_of("closure.nat.silhouette")
    s = Score(name="B", value=0.24240012, ci_low=0.1401, ci_high=0.3512, n=80, nulls=0, method="m",
              version="1", ceiling=0.49250001, floor=0.0)
    m = score_metrics("closure.nat.silhouette", [s], sil)
    # half-width 0.11 (two significant digits) -> 2 decimals, for the value and its bounds alike;
    # the human ceiling is not this estimate: four significant digits
    assert m["Silhouette.B"] == 0.24 and m["Silhouette.B_ci_lower"] == 0.14
    assert anchor_params("closure.nat.silhouette", [s], sil) == {"Silhouette.B_floor": 0.0,
                                                                 "Silhouette.B_ceiling": 0.4925}
    tight = Score(name="B", value=0.61234567, ci_low=0.6101, ci_high=0.6145, n=9000, nulls=0, method="m",
                  version="1")
    assert score_metrics("similarity.chart.mark_color", [tight], family_of("similarity.chart.mark_color"))[
        "Mark_color.B"] == 0.6123
    bare = Score(name="mae", value=5.0749999, ci_low=None, ci_high=None, n=40, nulls=0, method="m", version="1")
    assert score_metrics("similarity.chart.series_count", [bare], family_of("similarity.chart.series_count"))[
        "similarity.chart.series_count/mae"] == 5.075


def test_the_scorecard_reads_as_a_table():
    """MLflow renders the description's table without cell padding: each cell is padded with en
    spaces; pipes and HTML-like text are escaped; each score has the same decimals in every row."""
    from harness.tracking.scorecards import scorecard_markdown
    from tests.test_reports import MARK, SERIES, SIL, THINGS, battery_scores

    scores = battery_scores(0.5)
    intervals = {t: {"scores": [s.to_dict() for s in sc]} for t, sc in scores.items()}
    intervals[THINGS] = {"unavailable": "images for <concept uniqueID> | not in the mirror"}
    md = scorecard_markdown("m|x", "r1", intervals)
    lines = md.splitlines()
    table = [ln for ln in lines if ln.startswith("|")]
    assert all(ln.endswith("|") for ln in table)
    assert table[1].replace(" ", "").strip("|").split("|")[2] == "---:"  # the separator row
    cells = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in table]
    assert len({len(c) for c in cells}) == 1  # escaped pipes split no row
    assert "&lt;concept uniqueID&gt; \\| not in the mirror" in md and "**m\\|x**" in md
    body = {(c[0].replace("&ensp;", ""), c[1].replace("&ensp;", "").strip("*")): c for c in cells[2:]}
    assert all(c.startswith("&ensp;") and c.endswith("&ensp;") for c in cells[2][:8])
    assert set(body) >= {(SIL, "B"), (SIL, "kappa"), (SIL, "accuracy"), (MARK, "B"), (SERIES, "accuracy"),
                         (SERIES, "capacity"), (THINGS, "unavailable")}
    assert [k for k in body if k[0] == SIL][0] == (SIL, "B")  # the headline first, in bold
    value = {k: c[2].replace("&ensp;", "") for k, c in body.items()}
    assert value[(SIL, "B")] == "0.500" and value[(SIL, "kappa")] == "0.275"
    assert len(value[(SERIES, "capacity")].split(".")[1]) == 1  # a capacity in series: one decimal


def test_battery_run_sets_kind_view_key_order_and_table(tmp_path):
    from mlflow import MlflowClient

    from harness.tracking.mlflow_run import BatteryRun
    from harness.tracking.store import SHARED_VIEW_TAG
    from harness.trials.records import RecordStore
    from tests.test_cli import write_modal_human_records
    from tests.test_reports import battery_scores

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = write_modal_human_records(tmp_path / "closure.nat.silhouette.jsonl")
    records = RecordStore(path).read()
    with BatteryRun(uri=uri, experiment="present", run_name="m", tags={"gestalt.model": "m"},
                    tasks=["closure.nat.silhouette"]) as run:
        run.log_task("closure.nat.silhouette", battery_scores(0.5)["closure.nat.silhouette"], records, {}, path)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("present")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(exp.tags[SHARED_VIEW_TAG])  # a saved view: listed under "Views" on the runs page
    assert view["name"] and view["createdAt"] <= view["updatedAt"]
    assert json.loads(view["state"])["selectedColumns"] == [
        "metrics.`Silhouette.B`", "metrics.`Silhouette.B_ci_lower`", "metrics.`Silhouette.B_ci_upper`"]

    local = client.download_artifacts(run.run_id, "records/closure.nat.silhouette.jsonl", str(tmp_path / "a"))
    first = json.loads(open(local).readline())
    assert list(first)[:6] == ["stimulus_id", "rep", "model", "response", "ground_truth", "correct"]
    assert first == records[0]  # the same record, keys reordered
    table = json.loads(open(client.download_artifacts(run.run_id, "tables/closure.nat.silhouette.json",
                                                      str(tmp_path / "b"))).read())
    assert table["columns"][:4] == ["stimulus_id", "rep", "model", "response"] and len(table["data"]) == 80
    assert json.loads(table["data"][0][table["columns"].index("run_meta")]) == records[0]["run_meta"]
    # MLflow takes it for one of its tables: listed on the run, read back by load_table
    listed = json.loads(client.get_run(run.run_id).data.tags["mlflow.loggedArtifacts"])
    assert listed == [{"path": "tables/closure.nat.silhouette.json", "type": "table"}]
    loaded = client.load_table(exp.experiment_id, "tables/closure.nat.silhouette.json", run_ids=[run.run_id])
    assert len(loaded) == 80 and list(loaded.columns[:4]) == ["stimulus_id", "rep", "model", "response"]
    assert loaded["trial_id"].tolist() == [r["trial_id"] for r in records]


def test_the_runs_table_view_is_read_once_per_battery(tmp_path, monkeypatch):
    """Each task's headline metrics join the experiment's view, read back once per battery (a
    store round trip per task before), also when the battery fails after its first task."""
    from mlflow import MlflowClient

    from harness.tracking.mlflow_run import BatteryRun
    from harness.tracking.store import SHARED_VIEW_TAG
    from tests.test_reports import MARK, SIL, battery_scores

    reads = []
    real = MlflowClient.get_experiment
    monkeypatch.setattr(MlflowClient, "get_experiment", lambda self, i: (reads.append(i), real(self, i))[1])
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    scores = battery_scores(0.5)
    for tasks, fail in (([SIL, MARK], False), ([SIL], True)):
        reads.clear()
        with pytest.raises(RuntimeError) if fail else contextlib.nullcontext(), \
                BatteryRun(uri=uri, experiment="view", run_name="m", tags={}, tasks=tasks) as run:
            for task in tasks:
                path = tmp_path / f"{task}.jsonl"
                path.write_text(json.dumps({"parse_status": "ok"}) + "\n")
                run.log_task(task, scores[task], [{"parse_status": "ok"}], {}, path)
            if fail:
                raise RuntimeError("crash")
        assert len(reads) == 1
    view = json.loads(json.loads(MlflowClient(uri).get_experiment_by_name("view").tags[SHARED_VIEW_TAG])["state"])
    assert view["selectedColumns"] == [f"metrics.`{n}{b}`" for n in ("Silhouette.B", "Mark_color.B")
                                       for b in ("", "_ci_lower", "_ci_upper")]


def test_a_battery_reaches_the_store_in_ten_round_trips_and_tags_its_end_in_one(tmp_path, monkeypatch):
    """Each store call is a round trip (over the network for a tracking server): a battery opens
    the experiment once, and the tags a run gets as it ends (stimulus sets' digest, tables listed,
    record digest) are one write after its artifacts. A new run in an existing experiment made 13
    round trips before, three of them ``set_tag``."""
    import threading

    from mlflow import MlflowClient
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

    from harness.recipes import load_recipe
    from harness.run import run_recipe
    from tests import lifecycle as life
    from tests.fake_vendor_server import FakeVendorServer

    calls, inside = [], threading.local()

    def counted(name, method):
        def call(*args, **kwargs):  # the outermost store call only: one round trip each
            depth = getattr(inside, "depth", 0)
            if not depth:
                calls.append(name)
            inside.depth = depth + 1
            try:
                return method(*args, **kwargs)
            finally:
                inside.depth = depth
        return call

    for name, method in vars(SqlAlchemyStore).items():
        # shut_down_async_logging flushes this process's own queue: no store round trip
        if callable(method) and not name.startswith("_") and name != "shut_down_async_logging":
            monkeypatch.setattr(SqlAlchemyStore, name, counted(name, method))
    monkeypatch.setenv(life.ENV_KEY, life.KEY)
    with FakeVendorServer(key=life.KEY, answer=life.answer) as server:
        recipe = load_recipe(life.api_recipe(tmp_path, server.url))
        run_recipe(recipe, echo=lambda *_: None)  # makes the store and the experiment
        calls.clear()
        (result,) = run_recipe(recipe, echo=lambda *_: None, new_run=True)
    assert len(calls) <= 10, calls
    assert "set_tag" not in calls and calls.count("get_experiment_by_name") <= 2, calls
    assert calls[-2:] == ["log_batch", "update_run_info"], calls  # the closing tags, then the end
    run = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert {"gestalt.records_sha256", "gestalt.stimulus_sets_sha256"} <= set(run.data.tags)
    assert json.loads(run.data.tags[MLFLOW_LOGGED_ARTIFACTS]) == [
        {"path": f"tables/{life.TASK}.json", "type": "table"}]


def test_ui_refuses_a_missing_store_in_one_line(tmp_path):
    from tests.test_cli import gestalt

    res = gestalt("ui", "--uri", f"sqlite:///{tmp_path}/none.db")
    assert res.returncode == 2 and "no MLflow store here" in res.stderr and len(res.stderr.splitlines()) == 1
    assert not (tmp_path / "none.db").exists()


def test_register_and_the_report_link_to_the_ui_where_it_serves_the_store(tmp_path):
    """`gestalt register` prints the version's page at the address `gestalt ui` serves the store
    on (written beside it while it runs), else its default; the report links to a tracking
    server's pages only."""
    from harness.reports.report import mlflow_link
    from tests.test_cli import gestalt
    from tests.test_reports import log_battery_run

    db = tmp_path / "mlflow.db"
    run_id, _ = log_battery_run(f"sqlite:///{db}", "gestalt", "m-1", "supervised", 0.5, tmp_path=tmp_path)
    res = gestalt("register", run_id, "--uri", f"sqlite:///{db}")
    assert res.returncode == 0, res.stderr
    assert "http://127.0.0.1:5000/#/models/gestalt-scorecard-m-1/versions/1" in res.stdout
    (tmp_path / "mlflow.db.ui").write_text("http://127.0.0.1:5123\n")  # as `gestalt ui --port 5123` leaves it
    res = gestalt("register", run_id, "--uri", f"sqlite:///{db}", "--alias", "again")
    assert "http://127.0.0.1:5123/#/models/gestalt-scorecard-m-1/versions/1" in res.stdout, res.stdout
    # the report's pages outlive that server: a link only to a tracking server's pages
    assert "5123" not in mlflow_link(f"sqlite:///{db}", "1", run_id, "run") and "href" not in mlflow_link(
        f"sqlite:///{db}", "1", run_id, "run")
    assert f'href="https://mlflow.example.org/#/experiments/1/runs/{run_id}"' in mlflow_link(
        "https://user:pw@mlflow.example.org/", "1", run_id, "run")


@pytest.mark.parametrize("verbose", [False, True])
def test_ui_is_quiet_unless_verbose_and_its_page_opens_on_runs(tmp_path, verbose):
    """`gestalt ui` prints one line (where the runs table is), not a line per request nor library
    warnings, unless --verbose; its page stores the model-training view for a browser that has no
    choice yet (MLflow 3.17 reads it there, not from the experiment's tags)."""
    import urllib.request

    from tests.browser import base_of, ui
    from tests.test_reports import log_battery_run

    log_battery_run(f"sqlite:///{tmp_path}/mlflow.db", "gestalt", "m", "supervised", 0.5, tmp_path=tmp_path)
    with ui(tmp_path, *(["--verbose"] if verbose else [])) as url:
        page = urllib.request.urlopen(f"{base_of(url)}/", timeout=60).read().decode()
        for _ in range(3):
            urllib.request.urlopen(f"{base_of(url)}/ajax-api/2.0/mlflow/experiments/search?max_results=5",
                                   timeout=60).read()
    assert '"mlflow.workflowType_v1": "\\"machine_learning\\""' in page
    assert page.index("localStorage") < page.index("static-files/static/js/main")  # before MLflow reads it
    log = (tmp_path / "ui.log").read_text().splitlines()
    if verbose:
        assert any("GET /ajax-api/2.0/mlflow/experiments/search" in line for line in log), log
    else:
        assert len(log) == 1 and log[0].startswith("MLflow UI for "), log
