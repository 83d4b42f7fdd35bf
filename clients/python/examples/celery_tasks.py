import headway
from celery import Celery

app = Celery("photos")


def resize(path):
    """Stands for the real work."""


@app.task(bind=True)
def resize_photos(self, paths):
    # The Celery task id is the Headway id: the dashboard's task and Celery's result
    # are found by the same id.
    try:
        with headway.Task(f"Resize {len(paths)} photos", id=self.request.id,
                          total=len(paths), unit="images") as task:
            for path in paths:
                resize(path)
                task.update()  # raises headway.Canceled after a cancel request
    except headway.Canceled:
        return "canceled"  # the Headway task finished `canceled` on the way out
    return "done"
