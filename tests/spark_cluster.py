"""A Spark standalone cluster for the tests (scripts/stack.sh spark-up: a master and two workers of 1
core on 127.0.0.1) and spark-submit the way a user runs the jobs: pgshovel2 shipped as a zip with
--py-files, the JDBC driver, Kafka connector and Iceberg runtime with --jars, nothing else assumed.

Ports: TEST_SPARK_MASTER_PORT, TEST_SPARK_MASTER_WEBUI_PORT, TEST_SPARK_WORKER_WEBUI_PORT (worker i
uses that + i); defaults below."""

import glob
import os
import signal
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.workers import port_of

REPO = Path(__file__).resolve().parent.parent
SPARK_PORTS = ("SPARK_MASTER_PORT", "SPARK_MASTER_WEBUI_PORT", "SPARK_WORKER_WEBUI_PORT")
VENV = Path(os.environ.get("VENV", REPO / ".venv"))


def package_zip(out: Path) -> Path:
    """pgshovel2's Python package (sources and package data, no caches) as a --py-files zip."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted((REPO / "pgshovel2").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(REPO))
    return out


def job_jars() -> list[str]:
    """The jars a job is submitted with: the JDBC driver and every jar of the Spark jars folder
    (PGSHOVEL_SPARK_JARS, default .cache/spark-jars: Kafka connector, Iceberg runtime)."""
    folder = os.environ.get("PGSHOVEL_SPARK_JARS", str(REPO / ".cache" / "spark-jars"))
    return [os.environ.get("PGSHOVEL_JDBC_JAR", "/usr/share/java/postgresql.jar"),
            *sorted(glob.glob(os.path.join(folder, "*.jar")))]


class SparkCluster:
    """The running cluster: master (spark://127.0.0.1:P) and submit()."""

    def __init__(self, env: dict, zip_path: Path):
        self.env, self.zip = env, zip_path
        self.master = f"spark://127.0.0.1:{env['SPARK_MASTER_PORT']}"

    def script(self, *args: str) -> None:
        subprocess.run([str(REPO / "scripts" / "stack.sh"), *args], env=self.env, check=True)

    def submit(self, script: str, *args: str, log: Path, conf: dict[str, str] | None = None) -> subprocess.Popen:
        """spark-submit spark/<script> args to the cluster (client mode), output to log; a new process
        group (kill it with os.killpg). The driver and executors import pgshovel2 from the zip only."""
        settings = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                    "spark.ui.enabled": "false", "spark.driver.memory": "1g", "spark.executor.memory": "1g",
                    "spark.executor.cores": "1", "spark.cores.max": "2", "spark.sql.shuffle.partitions": "4",
                    "spark.pyspark.python": str(VENV / "bin" / "python"), **(conf or {})}
        cmd = [str(VENV / "bin" / "spark-submit"), "--master", self.master, "--jars", ",".join(job_jars()),
               "--py-files", str(self.zip)]
        for key, value in settings.items():
            cmd += ["--conf", f"{key}={value}"]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=str(VENV / "bin" / "python"))
        with open(log, "ab") as out:
            return subprocess.Popen([*cmd, str(REPO / "spark" / script), *args], stdout=out,
                                    stderr=subprocess.STDOUT, env=env, cwd=log.parent, start_new_session=True)

    def run(self, script: str, *args: str, log: Path, timeout: float = 600, **kw) -> None:
        """submit and wait; raises AssertionError with the log's tail when the job fails."""
        proc = self.submit(script, *args, log=log, **kw)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill(proc)
            raise
        assert code == 0, f"spark-submit {script} exited {code}:\n" + log.read_text()[-4000:]


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal a submitted job's process group (the spark-submit JVM and its Python driver)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    proc.wait(60)


@pytest.fixture(scope="session")
def spark_cluster(base_stack, tmp_path_factory):
    """The cluster, started for the tests that request it and stopped after them."""
    env = {**base_stack.env, "VENV": str(VENV), "SPARK_WORKER_MEMORY": "1500m"}
    env.update({key: str(port_of(f"TEST_{key}")) for key in SPARK_PORTS})
    cluster = SparkCluster(env, package_zip(tmp_path_factory.mktemp("spark") / "pgshovel2.zip"))
    cluster.script("spark-down")
    cluster.script("spark-up")
    yield cluster
    cluster.script("spark-down")
