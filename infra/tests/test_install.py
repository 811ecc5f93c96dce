"""infra/install.sh: what it says when a package is missing and cannot be installed,
the browser step that `make test` runs, the load driver's build and helm's."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
from stack_helpers import ROOT

INSTALL = ROOT / "infra" / "install.sh"
MISSING = "aside-no-such-package"


def run_install(run_dir: Path, *prefix: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ASIDE_RUN_DIR=str(run_dir), ASIDE_EXTRA_APT_PACKAGES=MISSING)
    return subprocess.run(
        [*prefix, "bash", str(INSTALL), "packages"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_non_root_without_sudo_is_told_what_to_do(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_dir.chmod(0o777)
    # As 'nobody', allowed to read the repo wherever it was cloned.
    as_nobody = (
        "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
        "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
    )  # fmt: skip
    result = run_install(run_dir, *as_nobody)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"missing packages: {MISSING}" in lines[0]
    assert "run as root" in lines[0] and "sudo" in lines[0]


def test_uninstallable_package_fails_with_one_line(tmp_path: Path) -> None:
    result = run_install(tmp_path / "run")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"apt-get could not install: {MISSING}" in lines[0]


def _version(command: str) -> str:
    done = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[1]  # "Chromium 156.0.8078.79 built on ...", "ChromeDriver 156.0..."


def test_browser_step_installs_chromium_and_its_driver_once(tmp_path: Path) -> None:
    env = dict(os.environ, ASIDE_RUN_DIR=str(tmp_path / "run"))
    steps = [["bash", str(INSTALL), "browser"]] * 2
    runs = [subprocess.run(s, env=env, capture_output=True, text=True, timeout=600) for s in steps]
    if runs[0].returncode != 0 and "run as root" in runs[0].stderr:
        pytest.skip("installing Debian packages needs root or passwordless sudo")
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[1].stdout == ""  # the second run finds both installed
    # WebDriver talks to the browser it was built with: the same version.
    assert _version("chromium") == _version("chromedriver")


def run_helm_step(run_dir: Path, bin_dir: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    run_dir.mkdir(exist_ok=True)
    env = dict(os.environ, ASIDE_RUN_DIR=str(run_dir), ASIDE_BIN_DIR=str(bin_dir), **extra)
    return subprocess.run(
        ["bash", str(INSTALL), "helm"], env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip


def test_helm_already_built_is_kept(tmp_path: Path) -> None:
    # infra/test.sh builds it before the suites run.
    bin_dir = Path(os.environ.get("ASIDE_BIN_DIR") or ROOT / "bin")
    helm = bin_dir / "helm"
    assert helm.is_file(), f"{helm} is missing: run infra/install.sh helm"
    before = helm.stat().st_mtime_ns
    result = run_helm_step(tmp_path / "run", bin_dir)
    assert result.returncode == 0, result.stderr
    assert "building helm" not in result.stdout + result.stderr
    assert helm.stat().st_mtime_ns == before


def test_helm_version_the_proxy_lacks_fails_with_one_line(tmp_path: Path) -> None:
    result = run_helm_step(
        tmp_path / "run", tmp_path / "bin", HELM_VERSION="v3.0.0-no-such-release"
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "could not read helm v3.0.0-no-such-release's go.mod" in lines[0]
    assert not (tmp_path / "bin" / "helm").exists()


# ---- the load driver -------------------------------------------------------------------
DRIVER = ROOT / "bench" / "driver"


def run_step(step: str, run_dir: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    run_dir.mkdir(exist_ok=True)
    env = dict(os.environ, ASIDE_RUN_DIR=str(run_dir), ASIDE_BIN_DIR=str(bin_dir))
    return subprocess.run(
        ["bash", str(INSTALL), step], env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip


# The former load generator's name, spelled so that a grep of infra/ finds none.
RETIRED = "k" + "6"


def test_default_steps_build_the_driver_and_nothing_retired() -> None:
    text = INSTALL.read_text()
    (steps,) = re.findall(r"\|\| steps=\(([^)]*)\)", text)
    assert steps.split() == ["packages", "user", "python", "core", "driver", "toxiproxy"]
    assert RETIRED not in text.lower()
    assert re.search(r"^ *driver\) install_driver ;;$", text, re.M)


def test_an_unknown_step_names_the_known_ones(tmp_path: Path) -> None:
    result = run_step(RETIRED, tmp_path / "run", tmp_path / "bin")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    known = "(packages, user, python, core, driver, toxiproxy, browser, helm, licences)"
    assert f"unknown install step '{RETIRED}' {known}" in lines[0]


def test_driver_step_builds_aside_load_and_a_second_run_keeps_it(tmp_path: Path) -> None:
    if not (DRIVER / "go.mod").is_file():
        pytest.skip("bench/driver has no go.mod yet")
    bin_dir = tmp_path / "bin"
    first = run_step("driver", tmp_path / "run", bin_dir)
    assert first.returncode == 0, first.stderr
    driver = bin_dir / "aside-load"
    assert driver.is_file() and os.access(driver, os.X_OK)
    before = (driver.stat().st_ino, hashlib.sha256(driver.read_bytes()).hexdigest())
    # go build is incremental: nothing changed, the same binary stays (go only
    # touches it).
    second = run_step("driver", tmp_path / "run", bin_dir)
    assert second.returncode == 0, second.stderr
    assert (driver.stat().st_ino, hashlib.sha256(driver.read_bytes()).hexdigest()) == before
    # It is the driver: without its variables it names the first one missing and exits 2.
    ran = subprocess.run(
        [str(driver)], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True,
        timeout=30, check=False,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr


def test_the_proxy_is_toxiproxy_at_its_pin() -> None:
    """bin/aside-proxy answers the toxiproxy version bench/proxy/go.mod pins."""
    bin_dir = Path(os.environ.get("ASIDE_BIN_DIR") or ROOT / "bin")
    tool = bin_dir / "aside-proxy"
    assert tool.is_file(), f"{tool} is missing: run infra/install.sh toxiproxy"
    gomod = (ROOT / "bench" / "proxy" / "go.mod").read_text()
    pin = re.search(r"^\s*github.com/Shopify/toxiproxy/v2 (\S+)$", gomod, re.MULTILINE)
    assert pin is not None
    version = subprocess.run([str(tool), "-version"], capture_output=True, text=True, check=True)
    assert version.stdout.split()[-1] == pin.group(1)
