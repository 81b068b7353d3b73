"""The helpers package installs and stays light to import."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_helpers_loads_no_heavy_optional_library():
    code = "import sys, helpers; print(*[m for m in ('umap', 'gensim', 'sklearn') if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "tests")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "", f"import helpers imported: {run.stdout.strip()}"


def test_helpers_is_installed_from_this_checkout():
    code = "import helpers, helpers.exercises, helpers.qkv.checks; print(helpers.__file__)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "tests")
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()).resolve() == ROOT / "helpers" / "__init__.py"
