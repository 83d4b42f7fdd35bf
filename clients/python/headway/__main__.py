"""`python -m headway run [--name N] [--id ID] [--parent ID] (SCRIPT | -m MODULE) [ARGS...]`:
runs a Python program that knows nothing of Headway as a task, every tqdm bar it draws
reported as a child (nested bars as their children). Exit status: the program's own; 3
when it stopped because of a cancel (as the `headway` command); 64 a usage error."""
import os
import runpy
import sys
import traceback

USAGE = """usage: python -m headway run [--name NAME] [--id ID] [--parent ID] (SCRIPT | -m MODULE) [ARGS...]

Runs SCRIPT (or MODULE) as a Headway task, every tqdm bar of it reported as a child task.
The server and token come from HEADWAY_URL and HEADWAY_TOKEN; ids get HEADWAY_TASK_PREFIX.
Exit status: the program's; 3 if it stopped because of a cancel request.
"""


def _usage(message=None):
    if message:
        sys.stderr.write(f"headway: {message}\n")
    sys.stderr.write(USAGE)
    return 64


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE) if argv else _usage()
        return 0 if argv else 64
    if argv[0] != "run":
        return _usage(f"unknown command {argv[0]!r}")
    options = {"--name": None, "--id": None, "--parent": None}
    rest = argv[1:]
    while rest and rest[0] in options:
        if len(rest) < 2:
            return _usage(f"{rest[0]} needs a value")
        options[rest[0]] = rest[1]
        rest = rest[2:]
    module = None
    if rest and rest[0] == "-m":
        if len(rest) < 2:
            return _usage("-m needs a module name")
        module, arguments = rest[1], rest[2:]
        program = module
    elif rest and not rest[0].startswith("-"):
        program, arguments = rest[0], rest[1:]
        if not os.path.isfile(program):
            # As python itself says it, before any task is made.
            sys.stderr.write(f"{sys.executable}: can't open file {os.path.abspath(program)!r}: "
                             "[Errno 2] No such file or directory\n")
            return 2
    else:
        return _usage("name a script or -m MODULE")

    from . import _autopatch  # noqa: F401  (instruments tqdm when the program loads it)
    from ._reporter import shared_reporter
    from ._task import Canceled, Task, record_failure, set_default_parent

    name = options["--name"] or " ".join([os.path.basename(program), *arguments])[:200]
    root = Task(name, id=options["--id"], parent=options["--parent"])
    set_default_parent(root)
    status = 0
    try:
        if module is not None:
            sys.argv = [module, *arguments]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [program, *arguments]
            sys.path[0] = os.path.dirname(os.path.abspath(program))
            runpy.run_path(program, run_name="__main__")
        root.finish("succeeded")
    except SystemExit as exit:
        root.finish_for(exit)
        code = exit.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code
        else:
            sys.stderr.write(f"{code}\n")
            status = 1
    except Canceled as canceled:
        root.finish_for(canceled)
        sys.stderr.write(f"headway: {canceled}\n")
        status = 3
    except KeyboardInterrupt as interrupt:
        root.finish_for(interrupt)
        status = 130
    except BaseException as error:
        record_failure(error, uncaught=True)
        root.finish_for(error)
        traceback.print_exc()
        status = 1
    reporter = shared_reporter()
    reporter._stopping = True
    reporter.close(reporter.settings.exit_timeout)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
