"""BaselineSubmitHook: the Spark provider's SparkSubmitHook with defaults fit for pgsync's jobs."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_provider_pgsync.baseline.passfile import PASSFILE_NAME, PassEntry, write_passfile
from airflow_provider_pgsync.changelog.private import PRIVATE_UMASK
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.spark_class_archive import archive_options, driver_archive, dump_command

DEFAULT_MASTER = "local[*]"


class BaselineSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that runs on ``local[*]`` when the Spark connection does not exist (the
    provider would fall back to YARN), finds ``spark-submit`` next to this Python when it is
    not on PATH (pip's pyspark installs it in the environment's ``bin``), and refuses cluster
    deploy mode on a standalone master (Spark runs no Python application that way) before
    anything is submitted."""

    def __init__(self, *, default_master: str = DEFAULT_MASTER, **kwargs: Any) -> None:
        self._default_master = default_master
        super().__init__(**kwargs)
        # the files the job writes hold rows: private on Hadoop's filesystems (executors anywhere),
        # unless the job's configuration says otherwise
        self._conf = {"spark.hadoop.fs.permissions.umask-mode": "077", **(self._conf or {})}

    def _resolve_connection(self) -> dict[str, Any]:
        found = True
        try:
            self.get_connection(self._conn_id)
        except AirflowException:
            found = False
        data = super()._resolve_connection()
        if not found:
            self.log.info(
                "Spark connection %r does not exist: running on master %s (not YARN)",
                self._conn_id,
                self._default_master,
            )
            data["master"] = self._default_master
        if str(data["master"]).startswith("spark://") and data["deploy_mode"] == "cluster":
            raise ConfigError(
                f"Spark connection {self._conn_id!r}: deploy mode 'cluster' on the standalone master "
                f"{data['master']} cannot run pgsync's jobs (Spark runs Python applications on a "
                "standalone cluster in client mode only); remove 'deploy-mode' from the connection's "
                "extra (or set it to 'client') so the driver runs where the Airflow task runs"
            )
        return data

    @property
    def master(self) -> str:
        """The master the job is submitted to (from the connection, or the default)."""
        return str(self._connection["master"])

    @property
    def cluster_mode(self) -> bool:
        """Whether the driver runs on the cluster (``deploy-mode cluster``), not here."""
        return self._connection["deploy_mode"] == "cluster"

    @property
    def kubernetes(self) -> bool:
        return self._is_kubernetes

    @property
    def application_args(self) -> list[str]:
        """The job's arguments."""
        return [str(a) for a in self._application_args or []]

    @property
    def job_conf(self) -> dict[str, str]:
        """The job's Spark configuration (``--conf``)."""
        return {k: str(v) for k, v in self._conf.items()}

    @property
    def job_env(self) -> dict[str, str]:
        """The environment variables of the job's driver (``env_vars``)."""
        return {k: str(v) for k, v in (self._env_vars or {}).items()}

    def shown_command(self, application: str) -> str:
        """The spark-submit command line of ``application`` as the provider logs it (masked)."""
        return self._mask_cmd(self._build_spark_submit_command(application))

    def add_file(self, path: str) -> None:
        """Ship ``path`` with the job (``--files``), after the files the options name."""
        self._files = f"{self._files},{path}" if self._files else path

    def set_conf(self, key: str, value: str) -> None:
        """Set a Spark configuration value of the job (``--conf``)."""
        self._conf = {**self._conf, key: value}

    def set_env(self, name: str, value: str) -> None:
        """Set an environment variable of the job's driver (``env_vars``; on YARN and Kubernetes
        the provider passes them as ``--conf``: never a secret)."""
        self._env_vars = {**(self._env_vars or {}), name: value}

    def ship_passwords(self, entries: Sequence[PassEntry], work: Path) -> str:
        """Give the job a password file of ``entries``: written in the private folder ``work``,
        shipped with the job (``--files``), found by the driver and the executors through
        ``PGPASSFILE`` (a path, no secret); the name the job's tasks find it by."""
        if self.kubernetes and self.cluster_mode:
            raise ConfigError(
                "on Kubernetes in cluster mode a job cannot take a password file from this worker; "
                "run it in client mode, or use connections that need no password"
            )
        file = work / PASSFILE_NAME
        write_passfile(file, entries)
        self.add_file(str(file))
        # in cluster mode the driver finds the shipped copy in its working directory
        self.set_env("PGPASSFILE", PASSFILE_NAME if self.cluster_mode else str(file))
        self.set_conf("spark.executorEnv.PGPASSFILE", PASSFILE_NAME)
        return PASSFILE_NAME

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        """Submit as the provider does, with the umask 077: spark-submit and what it starts here
        (the driver, a local master's executors and Python workers, the embedded Derby metastore)
        create the job's files 0600 and folders 0700 (``changelog/private.py``). A driver that runs
        here maps the class archive of the drivers before it when the worker turned the archive on,
        and when there is none yet, a short driver writes it once the job has succeeded
        (``spark_class_archive``; off by default)."""
        umask = os.umask(PRIVATE_UMASK)
        try:
            return self._submit(application, **kwargs)
        finally:
            os.umask(umask)

    def _submit(self, application: str, **kwargs: Any) -> str | None:
        if self.cluster_mode:
            return super().submit(application, **kwargs)
        conf = self._conf
        env = {**os.environ, **self.job_env}
        class_path = self._driver_class_path or str(conf.get("spark.driver.extraClassPath", ""))
        archive = driver_archive(str(conf.get("spark.driver.extraJavaOptions", "")), env, class_path)
        try:
            self._conf = archive_options(conf, archive)
            result = super().submit(application, **kwargs)
        except BaseException:
            if archive is not None:
                archive.release()
            raise
        finally:
            self._conf = conf
        if archive is not None and archive.dump:  # the job succeeded: nothing here may fail it
            try:
                archive.write(dump_command(self._get_spark_binary_path(), conf, archive, class_path), env)
            except Exception as exc:
                archive.release()
                self.log.warning("could not start saving the Spark driver's classes: %s", exc)
        return result

    def _get_spark_binary_path(self) -> list[str]:
        binary = self._connection["spark_binary"]
        if shutil.which(binary) is None:
            beside = Path(sys.executable).parent / binary
            if beside.exists():
                return [str(beside)]
        return [binary]


def driver_environment() -> dict[str, str]:
    """Environment for a job whose driver runs here (client mode): the driver and local
    executors use this Python (they import this package), and pip's pyspark serves as
    SPARK_HOME unless one is set; ``spark.pyspark.python`` overrides it on a cluster."""
    env = {}
    for name in ("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"):  # local executors run Python tasks too
        if name not in os.environ:
            env[name] = sys.executable
    if "SPARK_HOME" not in os.environ:
        import pyspark

        env["SPARK_HOME"] = str(Path(pyspark.__file__).resolve().parent)
    return env
