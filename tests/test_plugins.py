"""A third-party distribution adds a model source through the ``gestalt.models`` entry-point
group, installed into a temporary site directory (no network), without touching gestalt."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile

import yaml

from tests.conftest import MIRROR, REPO

TASK = "closure.nat.silhouette"
PLUGIN = '''
from harness.models.base import Generation, ModelAdapter


class Constant(ModelAdapter):
    """Answers every image with its name: the smallest possible generate model."""

    capabilities = frozenset({"generate"})

    @property
    def fingerprint(self):
        return {"source": "constant", "answer": self.spec.name}

    def generate(self, image, prompt, settings):
        return Generation(text=self.spec.name)
'''


def build_wheel(tmp_path):
    files = {
        "gestalt_constant/__init__.py": PLUGIN,
        "gestalt_constant-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: gestalt-constant\nVersion: 0.1\n",
        "gestalt_constant-0.1.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                                 "Tag: py3-none-any\n"),
        "gestalt_constant-0.1.dist-info/entry_points.txt": "[gestalt.models]\nconstant = gestalt_constant:Constant\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("gestalt_constant-0.1.dist-info/RECORD,,")
    files["gestalt_constant-0.1.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = tmp_path / "gestalt_constant-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def test_a_plugin_distribution_adds_a_source_listed_and_run_from_a_recipe(tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--target", str(site), str(build_wheel(tmp_path))], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{site}"}

    def gestalt(*args):
        return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, check=False)

    listed = gestalt("models", "list")
    assert "constant: gestalt_constant:Constant (plugin gestalt-constant 0.1)" in listed.stdout
    assert "timm: harness.models.encoders:TimmEncoder (built-in)" in listed.stdout
    recipe = {"name": "plugin", "models": [{"id": "always-car", "source": "constant", "name": "car"}],
              "tasks": [TASK], "bootstrap": {"n_boot": 100, "n_boot_kappa": 100},
              "runtime": {"progress": False}, "data": {"mirror": str(MIRROR)},
              "tracking": {"enabled": False}, "output_dir": str(tmp_path / "out")}
    (tmp_path / "plugin.yaml").write_text(yaml.safe_dump(recipe))
    run = gestalt("recipe", "plugin.yaml")
    assert run.returncode == 0, run.stderr
    records = [json.loads(x) for x in (tmp_path / "out/always-car/records" / f"{TASK}.jsonl").open()]
    assert len(records) == 80 and {r["response"] for r in records} == {"car"}
    # without the plugin installed the same recipe is one line naming the source, exit 2
    missing = subprocess.run([sys.executable, "-m", "harness.cli", "recipe", "plugin.yaml"], capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path, check=False)
    assert missing.returncode == 2 and "unknown model source 'constant'" in missing.stderr
