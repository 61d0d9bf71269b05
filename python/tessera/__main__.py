"""python -m tessera ARGS: the `tessera` command (devices, plugins, doctor, check --device NAME, ops,
graph, run; docs/README.md) of this package's runtime. The wheel carries the command in
tessera/bin/; in a build tree it is <build>/bin/tessera. Without it, `devices` and `plugins` are
answered from Python."""
import os
import pathlib
import sys


def _command():
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here / "bin" / "tessera", here.parent.parent / "bin" / "tessera"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def main(argv):
    cmd = _command()
    if cmd is not None:
        os.execv(str(cmd), [str(cmd)] + argv)
    import tessera
    if argv[:1] == ["devices"]:
        for d in tessera.devices():
            print("%-24s %s" % (d["name"], d["plugin"]))
        return 0
    if argv[:1] == ["plugins"]:
        for p in tessera.plugins():
            print("%-28s %-10s %-9s %s" % (p["name"], p["kind"], p["status"], p["reason"] or p["manifest"]))
        return 0
    sys.stderr.write("python -m tessera: the tessera command is not installed next to this package; only "
                     "'devices' and 'plugins' are available\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
