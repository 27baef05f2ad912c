"""A Docker engine of the tests' own, and the images of the compose stack built on it.

The deployment test starts the stack of ``docker/`` on a real engine. Nothing is pulled from a
registry (none is reachable from the machines the tests run on):

- Debian's ``docker.io``, ``docker-compose`` and ``debootstrap`` are installed when missing (as
  root, with apt-get);
- the base image is a Debian bookworm made by ``debootstrap --variant=minbase`` with the machine's
  own CPython 3.11 in ``/usr/local``, laid out as the official ``python:3.11-slim-bookworm`` is
  (Debian's python3 is 3.11.2, older than the pins of ``constraints.txt`` allow), trusting the
  certificate authorities the machine trusts; its tarball is cached, keyed by what goes into it;
- ``dockerd`` runs as root on a data root in the cache (its layer cache is what makes a second
  build quick: the dependency layers change only with ``constraints.txt`` and ``setup.cfg``), on an
  exec root and socket of its own, and is stopped at the end;
- the images are built by the ``docker-compose ... build`` of docs/deployment.md with
  ``docker/debian/docker-compose.yml``, which builds PostgreSQL, Redis, Prometheus and an S3
  endpoint (moto's server) from Debian's packages and PyPI instead of pulling them.

``python -m tests.deploy.engine prepare`` does all of it while the network is there (the test
command runs it before the suite, which may run without a network); the test's own run then finds
every layer built. ``python -m tests.deploy.engine tools`` installs the Debian packages of the
other tools tests run (``TOOL_PACKAGES``: promtool) the same way. Every failure is a
``ServiceUnavailable`` whose message says why in one line.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.real_kafka.cluster import cache_root
from tests.services import ServerProcess, ServiceUnavailable, current_account, last_line

REPO = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO / "docker"
#: The image the platform's Dockerfile and the Debian service images start from in the tests.
BASE_IMAGE = "tiering-debian:bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: What CPython's extension modules link against, as the official slim image installs them.
BASE_PACKAGES = (
    "ca-certificates",
    "netbase",
    "tzdata",
    "libssl3",
    "libsqlite3-0",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libreadline8",
    "libncursesw6",
    "libuuid1",
    "zlib1g",
    "libexpat1",
)
#: The commands the test needs, and the Debian package of each.
HOST_PACKAGES = {
    "dockerd": "docker.io",
    "docker": "docker.io",
    "docker-compose": "docker-compose",
    "debootstrap": "debootstrap",
}
#: The commands other tests run, and the Debian package of each: the test command installs them
#: before the suite (``python -m tests.deploy.engine tools``), which may run without a network; a
#: test that finds one missing installs it itself (``install_debian_packages``).
TOOL_PACKAGES = {"promtool": "prometheus"}
#: How long dockerd may take to answer, and to stop.
ENGINE_TIMEOUT = 60.0
#: How long a test waits for the images the test command builds in the background.
LOCK_TIMEOUT = 1800.0
#: The base image's Python modules that prove every runtime library is there.
PYTHON_CHECK = "import ssl, sqlite3, ctypes, bz2, lzma, uuid, zlib, readline, venv, ensurepip"


def docker_cache(environ: Mapping[str, str] | None = None) -> Path:
    return cache_root(environ) / "docker"


def install_engine(path: str | None = None) -> None:
    """Debian's packages for every command the test needs that is missing (root only), before any
    of them is used: ``base_tarball`` and ``docker_engine`` both start here. ``path``: where the
    commands are looked up (None: ``PATH``). A command still missing after the install is one line
    naming it."""
    install_debian_packages(HOST_PACKAGES, "no Docker engine", path)


def install_debian_packages(commands: Mapping[str, str], purpose: str, path: str | None = None) -> None:
    """Debian's package of each of ``commands`` (command -> package) that is missing, with apt-get
    as root; ServiceUnavailable in one line (``purpose``: what cannot be had without them) when
    it cannot be installed or a command is still missing after."""
    missing = sorted({pkg for cmd, pkg in commands.items() if shutil.which(cmd, path=path) is None})
    if not missing:
        return
    names = ", ".join(missing)
    if os.geteuid() != 0:
        raise ServiceUnavailable(f"{purpose}: {names} missing and installing needs root")
    if shutil.which("apt-get", path=path) is None:
        raise ServiceUnavailable(f"{purpose}: {names} missing and there is no apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if path is not None:
        env["PATH"] = path
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / "apt-get.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one apt-get at a time among the test processes (dpkg's lock fails at once)
        for args in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        ):
            try:
                proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ServiceUnavailable(f"{' '.join(args[:2])} of {names} failed: {exc}") from exc
            if proc.returncode != 0:
                why = last_line(proc.stderr or proc.stdout)
                raise ServiceUnavailable(f"{' '.join(args[:2])} of {names} failed: {why}")
    still = [cmd for cmd in commands if shutil.which(cmd, path=path) is None]
    if still:
        raise ServiceUnavailable(f"{purpose}: {', '.join(still)} still missing after apt-get install {names}")


def _python_home() -> Path:
    return Path(sys.base_prefix)


def base_key() -> str:
    """What the base image is made of: the packages, the mirror, this Python's build and version."""
    parts = [*BASE_PACKAGES, DEBIAN_MIRROR, sys.version, str(sysconfig.get_config_var("CONFIG_ARGS"))]
    parts.append(
        Path("/etc/ssl/certs/ca-certificates.crt").read_text()
        if Path("/etc/ssl/certs/ca-certificates.crt").exists()
        else ""
    )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _run(args: Sequence[str], what: str, *, env: Mapping[str, str] | None = None, timeout: float = 1800) -> str:
    try:
        proc = subprocess.run(
            list(args), capture_output=True, text=True, env=dict(env) if env else None, timeout=timeout
        )
    except FileNotFoundError as exc:  # install_engine ran first: a command it does not know of
        raise ServiceUnavailable(f"{what} failed: {args[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise ServiceUnavailable(f"{what} failed: no answer in {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise ServiceUnavailable(f"{what} failed (exit {proc.returncode}): {last_line(proc.stderr or proc.stdout)}")
    return proc.stdout


def _copy_python(rootfs: Path) -> None:
    """The machine's CPython into ``/usr/local`` of the root filesystem, without its site-packages
    (the image makes its own virtual environment), tests and scripts of installed packages."""
    home = _python_home()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    local = rootfs / "usr" / "local"
    (local / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(home / "bin" / version, local / "bin" / version)
    for name in ("python3", "python"):
        (local / "bin" / name).unlink(missing_ok=True)
        (local / "bin" / name).symlink_to(version)
    for lib in (home / "lib").glob("libpython3*.so*"):
        shutil.copy2(lib, local / "lib" / lib.name, follow_symlinks=False)
    shutil.copytree(
        home / "lib" / version,
        local / "lib" / version,
        symlinks=True,
        ignore=shutil.ignore_patterns("site-packages", "test", "idlelib", "tkinter", "turtledemo", "__pycache__"),
    )
    (local / "lib" / version / "site-packages").mkdir(exist_ok=True)
    if (home / "include" / version).is_dir():
        shutil.copytree(home / "include" / version, local / "include" / version, symlinks=True)


def base_tarball(cache: Path) -> Path:
    """The base root filesystem as a tarball in the cache, made the first time (1-2 minutes)."""
    tarball = cache / f"base-{base_key()}.tar"
    if tarball.exists():
        return tarball
    install_engine()
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="base-", dir=cache))
    try:
        rootfs = work / "rootfs"
        print(f"deploy: debootstrap bookworm into {rootfs}", file=sys.stderr, flush=True)
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            "debootstrap",
        )
        _copy_python(rootfs)
        # The machine's trust store, so that pip and apt in an image build reach what the machine reaches.
        shutil.copy2("/etc/ssl/certs/ca-certificates.crt", rootfs / "etc/ssl/certs/ca-certificates.crt")
        _run(["chroot", str(rootfs), "ldconfig"], "ldconfig in the base")
        _run(["chroot", str(rootfs), "/usr/local/bin/python3", "-c", PYTHON_CHECK], "the base's python3")
        for cache_dir in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / cache_dir).glob("*.deb"):
                entry.unlink()
        partial = tarball.with_suffix(".partial")
        _run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], "tar of the base")
        partial.rename(tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for old in cache.glob("base-*.tar"):
        if old != tarball:
            old.unlink()
    return tarball


@dataclass(frozen=True)
class Engine:
    """A running dockerd of the tests' own: the client reaches it through ``env``."""

    socket: Path
    process: ServerProcess

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}"}

    def docker(self, *args: str, what: str | None = None, timeout: float = 1800) -> str:
        return _run(["docker", *args], what or f"docker {args[0]}", env=self.env, timeout=timeout)

    def answers(self) -> bool:
        proc = subprocess.run(["docker", "version"], capture_output=True, env=self.env, timeout=30)
        return proc.returncode == 0


@contextmanager
def docker_engine(data_root: Path) -> Iterator[Engine]:
    """dockerd on ``data_root`` with an exec root and socket of its own, stopped at the end
    (its containers with it); ServiceUnavailable when it cannot run here."""
    install_engine()
    if os.geteuid() != 0:
        raise ServiceUnavailable("no Docker engine: dockerd runs as root and the tests do not")
    data_root.mkdir(parents=True, exist_ok=True)
    with _dockerd(data_root) as engine:
        yield engine


@contextmanager
def exclusive(cache: Path, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """One user of the cache at a time (the base tarball, one dockerd on its data root): a test
    waits for the test command's ``prepare``, started in the background before the suite, to
    finish its builds and stop its engine."""
    cache.mkdir(parents=True, exist_ok=True)
    data_root = cache / "data-root"
    with open(cache / "engine.lock", "w") as lock:
        deadline = time.monotonic() + timeout
        said = False
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(
                        f"the Docker data root {data_root} stayed busy for {timeout:.0f} s"
                    ) from None
                if not said:
                    print(
                        f"deploy: waiting for the image builds ({data_root.parent / 'prepare.log'})",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def _dockerd(data_root: Path) -> Iterator[Engine]:
    run_dir = Path(tempfile.mkdtemp(prefix="tdk-"))  # short: the exec root holds unix sockets
    socket = run_dir / "docker.sock"
    args = [
        "dockerd",
        "--data-root", str(data_root),
        "--exec-root", str(run_dir / "exec"),
        "--pidfile", str(run_dir / "docker.pid"),
        "--host", f"unix://{socket}",
        "--storage-driver", "overlay2",
    ]  # fmt: skip
    process = ServerProcess.start("dockerd", args, log=run_dir / "dockerd.log", account=current_account())
    engine = Engine(socket, process)
    try:
        process.wait_until(lambda: socket.exists() and engine.answers(), timeout=ENGINE_TIMEOUT)
        yield engine
    finally:
        process.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def import_base(engine: Engine, tarball: Path) -> None:
    """The base tarball as ``BASE_IMAGE`` unless the engine has this very one already."""
    key = tarball.stem.removeprefix("base-")
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", '{{ index .Config.Labels "tiering.base" }}', BASE_IMAGE],
        capture_output=True,
        text=True,
        env=engine.env,
    )
    if proc.returncode == 0 and proc.stdout.strip() == key:
        return
    changes = [
        f"LABEL tiering.base={key}",
        "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
        'CMD ["python3"]',
    ]
    args = [
        "docker",
        "import",
        *(part for change in changes for part in ("--change", change)),
        str(tarball),
        BASE_IMAGE,
    ]
    _run(args, "docker import of the base", env=engine.env)


def prepare(*, environ: Mapping[str, str] | None = None) -> None:
    """Everything the deployment test needs that takes the network: the engine's packages, the
    base image and every image of the stack, built (then the engine is stopped again)."""
    from tests.deploy.stack import build_images

    cache = docker_cache(environ)
    started = time.monotonic()
    with exclusive(cache):
        tarball = base_tarball(cache)
        with docker_engine(cache / "data-root") as engine:
            import_base(engine, tarball)
            build_images(engine)
    print(f"deploy: images ready in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    if argv not in (["prepare"], ["tools"]):
        print("usage: python -m tests.deploy.engine prepare|tools", file=sys.stderr)
        return 2
    try:
        if argv == ["tools"]:
            install_debian_packages(TOOL_PACKAGES, "no test tools")
        else:
            prepare()
    except ServiceUnavailable as exc:
        print(f"deploy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
