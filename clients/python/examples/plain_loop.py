import headway


def resize(path):
    """Stands for the real work."""


paths = [f"photos/{n:05}.jpg" for n in range(2_000)]

# One task with a child per step; a failure finishes both `failed` with the traceback.
with headway.Task("Nightly photo resize", id="photo-resize"):
    for path in headway.track(paths, "Resizing", unit="images"):
        resize(path)
