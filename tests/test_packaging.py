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


def requirement_names(path):
    """Lower-case names of the `name==version` lines of a requirements file."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {line.split("==")[0].lower() for line in lines if "==" in line}


def test_a_learners_set_up_has_no_grading_tools():
    learner = requirement_names(ROOT / "requirements.txt") | requirement_names(ROOT / "binder" / "requirements.txt")
    assert not learner & {"nbgrader", "notebook"}, "nbgrader shows its menu, Validate button and panels to learners"


def test_the_instructors_set_up_adds_nbgrader_to_the_learners():
    text = (ROOT / "requirements-instructor.txt").read_text()
    assert "-r requirements.txt" in text.splitlines()
    assert "nbgrader" in requirement_names(ROOT / "requirements-instructor.txt")
