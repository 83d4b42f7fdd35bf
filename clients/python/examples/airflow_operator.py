import re

import headway
from airflow.models.baseoperator import BaseOperator


def resize(path):
    """Stands for the real work."""


class ResizePhotosOperator(BaseOperator):
    """Resizes photos, reporting each try of each run as a Headway task."""

    def __init__(self, paths, **kwargs):
        super().__init__(**kwargs)
        self.paths = paths

    def execute(self, context):
        ti = context["ti"]
        # One Headway id per try of this task in this run (ids allow [A-Za-z0-9._~:-]).
        raw = f"{ti.dag_id}.{ti.task_id}.{ti.run_id}.{ti.try_number}"
        task_id = re.sub(r"[^A-Za-z0-9._~:-]", "-", raw)[:128]
        with headway.Task(f"{ti.dag_id} / {ti.task_id}", id=task_id, total=len(self.paths),
                          unit="images") as task:
            for path in self.paths:
                resize(path)
                task.update()
        headway.flush(10)  # Airflow may end the worker process right after execute()
        return len(self.paths)
