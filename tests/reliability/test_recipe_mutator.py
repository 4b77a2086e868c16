"""The recipe mutator: a few hundred seeded mutations of the shipped recipes
and a small one, each of which must either load or be refused in one line naming the file (or
the override) and the key: never a traceback, never a hang.

``GESTALT_MUTATIONS`` sets how many (default 300), ``GESTALT_MUTATION_SEED`` the seed.
"""

import os
import random
import time

import yaml

from tests.conftest import REPO

N = int(os.environ.get("GESTALT_MUTATIONS", "300"))
SEED = int(os.environ.get("GESTALT_MUTATION_SEED", "0"))
# runs as it is in under a minute on a CPU (benchmarks/faults.py runs mutations of it that plan), its
# store and output relative to the folder it runs in
SMALL = """name: small
seed: 0
models:
  - {id: m, source: timm, name: test_vit, weights: random, batch_size: 8}
tasks: [closure.nat.silhouette, similarity.chart.series_count]
task_options:
  similarity.chart.series_count: {n_test: 20, n_train: 40, readout: {alphas: [1.0]}}
bootstrap: {n_boot: 200, n_boot_kappa: 200, seed: 0}
runtime: {processes: 1, device: cpu, progress: false}
tracking: {enabled: true, uri: sqlite:///mlflow.db, experiment: small}
output_dir: out
"""
TOKENS = ["[", "]", "{", "}", ":", ": ", "- ", "&a ", "*a", "*b", "!!python/object:os.system ", "\t", "\x00",
          "\xff", "012", "0o17", "1:30", "yes", "no", "on", "~", "-1", "1e9", "99999999999999999999", "'",
          '"', "#", "<<: *a", "? ", "|", ">", "%YAML 1.1\n---\n", "...\n", "\ufeff", "\u2028", "ſ", "---\n"]
VALUES = [None, -1, 0, 10**12, 1.5, "x", "", [], {}, [[[[1]]]], {"a": {"b": {"c": 1}}}, True, "nope",
          "ratio.chart.grape_type9", "proximity.dots", "closure.nat.silhouette:v-1", "\x00", "a" * 5000,
          "/dev/null", "bogus://x"]


def text_mutation(text: str, rng: random.Random) -> bytes:
    lines = text.split("\n")
    kind = rng.randrange(8)
    i = rng.randrange(len(lines))
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(i, lines[rng.randrange(len(lines))])  # a duplicate key, most often
    elif kind == 2:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 3:
        pos = rng.randrange(len(lines[i]) + 1)
        lines[i] = lines[i][:pos] + rng.choice(TOKENS) + lines[i][pos:]
    elif kind == 4:
        lines[i] = " " * rng.randrange(1, 5) + lines[i]
    elif kind == 5:  # a typo in a key
        word = lines[i]
        if ":" in word:
            pos = rng.randrange(max(1, word.index(":")))
            lines[i] = word[:pos] + word[pos + 1:] if rng.random() < 0.5 else word[:pos] + word[pos] + word[pos:]
    elif kind == 6:
        data = "\n".join(lines).encode()
        cut = rng.randrange(len(data))
        return data[:cut] + bytes([rng.randrange(256)]) + data[cut + 1:]
    else:
        return "\n".join(lines).encode()[: rng.randrange(len(text) + 1)]
    return "\n".join(lines).encode("utf-8", "surrogatepass")


def paths_of(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths_of(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths_of(v, prefix + (i,))


def tree_mutation(text: str, rng: random.Random) -> bytes:
    data = yaml.safe_load(text)
    path = rng.choice([p for p in paths_of(data) if p])
    parent = data
    for k in path[:-1]:
        parent = parent[k]
    kind = rng.randrange(3)
    if kind == 0:
        parent[path[-1]] = rng.choice(VALUES)
    elif kind == 1 and isinstance(parent, dict):
        parent[str(path[-1]) + rng.choice(["_", "s", "x"])] = parent.pop(path[-1])  # misspelt key
    elif isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()


def test_recipe_mutator(tmp_path):
    from harness.errors import GestaltError
    from harness.recipes import load_recipe

    seeds = [SMALL] + [p.read_text() for p in sorted((REPO / "recipes").glob("*.yaml"))]
    rng = random.Random(SEED)
    loaded = refused = 0
    crashes: list[str] = []
    slowest = 0.0
    for k in range(N):
        base = rng.choice(seeds)
        data = text_mutation(base, rng) if rng.random() < 0.6 else tree_mutation(base, rng)
        path = tmp_path / f"m{k:04d}.yaml"
        path.write_bytes(data)
        t0 = time.perf_counter()
        try:
            load_recipe(path)
            loaded += 1
        except GestaltError as e:
            message = str(e)
            if "\n" in message or not message.startswith(str(path)):
                crashes.append(f"{path.name}: message not one line naming the file: {message[:200]!r}")
            refused += 1
        except Exception as e:  # the defect this test exists for  # noqa: BLE001
            crashes.append(f"{path.name}: {type(e).__name__}: {str(e)[:200]}")
        slowest = max(slowest, time.perf_counter() - t0)
    print(f"\n{N} recipe mutations (seed {SEED}): {refused} refused in one line, {loaded} loaded, "
          f"{len(crashes)} tracebacks; slowest load {slowest:.2f} s")
    assert not crashes, "\n".join(crashes[:20])
    assert refused and loaded  # the mutations exercise both sides
    assert slowest < 10  # no alias bomb or nesting blow-up gets through unbounded


def test_override_mutations(tmp_path):
    """The same for command-line overrides: bad YAML, missing places, wrong types."""
    from harness.errors import GestaltError
    from harness.recipes import load_recipe

    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    rng = random.Random(SEED)
    keys = ["tasks", "seed", "runtime.processes", "models.0.batch_size", "models.5.id", "bootstrap.n_boot",
            "task_options.similarity.chart.series_count.n_test", "task_options.nope.x", "runtime.progress",
            "models.0.generation.temprature", "tracking"]
    crashes = []
    for _ in range(max(N // 3, 30)):
        key = rng.choice(keys)
        value = "".join(rng.choice(TOKENS + ["1", "a", "true", "[1]"]) for _ in range(rng.randrange(1, 4)))
        try:
            load_recipe(path, {key: value})
        except GestaltError as e:
            if "\n" in str(e):
                crashes.append(f"--{key}={value!r}: {str(e)[:200]!r}")
        except Exception as e:  # noqa: BLE001
            crashes.append(f"--{key}={value!r}: {type(e).__name__}: {str(e)[:200]}")
    assert not crashes, "\n".join(crashes[:20])


# -- every option of the shipped recipes, mutated into a wrong type or out of range ---------------

def wrong_values(value) -> list:
    """Values an option holding ``value`` must refuse: another type (a boolean, text or a float
    where an integer goes), or a number no setting takes."""
    if isinstance(value, bool):
        return ["yes", "true", 1]
    if isinstance(value, int):
        return [True, str(value), float(value), "x", -2147483648, 2**63]
    if isinstance(value, float):
        return [str(value), True, "x", float("nan"), -1e300]
    if isinstance(value, list):
        return ["x", {"a": 1}] + [value[:i] + [bad] + value[i + 1:] for i, v in enumerate(value)
                                  for bad in wrong_values(v)[:3]]
    return [["x"], {"a": 1}, 3]


def option_leaves(node, prefix):
    """(key path, value) of every option under ``node``; mappings are walked into, lists are leaves."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from option_leaves(v, prefix + (k,))
    else:
        yield prefix, node


def shipped_option_mutations():
    """Each option once per (place, name, type): the recipes repeat the same options often."""
    seen = set()
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        places = [(("models", i, "options"), m.get("options", {})) for i, m in enumerate(data["models"])]
        places += [(("models", i, "generation"), m["generation"]) for i, m in enumerate(data["models"])
                   if "generation" in m]
        places += [(("task_options", t), o) for t, o in (data.get("task_options") or {}).items()]
        for prefix, options in places:
            for key, value in option_leaves(options, prefix):
                if key[-1] in ("ood", "human_sample", "checkpoint_dir", "device", "augment", "paper_model"):
                    continue  # free text or an open value: no type to get wrong
                if set(key) & {"model_kwargs", "processor_kwargs", "extra_body"}:
                    continue  # passed on to the library or vendor, which reads them
                kind = (key[0] == "models", key[-2] == "readout", key[-1], type(value))
                if kind in seen:
                    continue
                seen.add(kind)
                for bad in wrong_values(value):
                    yield path, key, bad


def test_every_option_mutation_is_refused_at_load_naming_file_line_and_key(tmp_path):
    """Each option of each shipped recipe (models' options and generation settings, task
    options and their readout settings) set to a wrong type or an out-of-range value: refused by
    load_recipe in one line ``file:line: key: ...``: none loads, none is a traceback."""
    from harness.errors import GestaltError
    from harness.recipes import load_recipe

    loaded, crashes, tried = [], [], 0
    for k, (source, key, bad) in enumerate(shipped_option_mutations()):
        data = yaml.safe_load(source.read_text())
        node = data
        for part in key[:-1]:
            node = node[part]
        node[key[-1]] = bad
        path = tmp_path / f"{source.stem}-{k:05d}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        dotted = ".".join(map(str, key))
        tried += 1
        try:
            load_recipe(path)
            loaded.append(f"{source.name}: {dotted}={bad!r} loaded")
        except GestaltError as e:
            message = str(e)
            if "\n" in message or not message.startswith(f"{path}:") or f": {dotted}" not in message:
                crashes.append(f"{source.name}: {dotted}={bad!r}: {message[:200]!r}")
        except Exception as e:  # noqa: BLE001
            crashes.append(f"{source.name}: {dotted}={bad!r}: {type(e).__name__}: {str(e)[:200]}")
    print(f"\n{tried} option mutations: {len(loaded)} loaded, {len(crashes)} not one line naming the key")
    assert tried > 150
    assert not loaded, "\n".join(loaded[:30]) + f"\n({len(loaded)} in all)"
    assert not crashes, "\n".join(crashes[:30]) + f"\n({len(crashes)} in all)"
