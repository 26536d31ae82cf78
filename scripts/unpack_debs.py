"""Unpacks .deb files into a folder without dpkg (the GPU machine has none): a .deb is an `ar`
archive whose data.tar.* member holds the files. Usage: unpack_debs.py DEST FILE.deb..."""
import io
import os
import sys
import tarfile


def ar_members(data):
    if data[:8] != b"!<arch>\n":
        raise ValueError("not an ar archive")
    at = 8
    while at + 60 <= len(data):
        header = data[at:at + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        yield name, data[at + 60:at + 60 + size]
        at += 60 + size + (size % 2)


def unpack(deb, dest):
    with open(deb, "rb") as f:
        data = f.read()
    for name, body in ar_members(data):
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                tar.extractall(dest, filter="tar" if hasattr(tarfile, "data_filter") else None)
            return
    raise ValueError(f"{deb}: no data.tar member")


def main():
    if len(sys.argv) < 3:
        raise SystemExit("usage: unpack_debs.py DEST FILE.deb...")
    dest = sys.argv[1]
    os.makedirs(dest, exist_ok=True)
    for deb in sys.argv[2:]:
        try:
            unpack(deb, dest)
        except (OSError, ValueError, tarfile.TarError) as e:
            raise SystemExit(f"unpack_debs: {deb}: {e}")


if __name__ == "__main__":
    main()
