#!/usr/bin/python3
"""Round trip of a pactrain checkpoint through PyTorch.

pactrain checkpoints are safetensors files: an 8-byte little-endian header length, a JSON header
({name: {dtype, shape, data_offsets}}, "__metadata__": {...}) and the raw tensor bytes. This script
reads one with nothing but json, struct and torch, loads ResNet-18/34/50 checkpoints into
torchvision's models (the parameter names are torchvision's), runs a forward pass, and writes
the tensors back to a new file that `pactrain eval --checkpoint` accepts.

Usage: /usr/bin/python3 scripts/checkpoint_torch.py CHECKPOINT [OUTPUT]
"""
import json
import os
import struct
import sys

try:
    import torch
except ImportError:
    sys.exit("checkpoint_torch.py needs PyTorch: apt-get install python3-torch, then run it with "
             "/usr/bin/python3 (torchvision's ResNets also need python3-torchvision)")

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I8": torch.int8,
          "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8}


def load(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = bytearray(data[begin:end])
        tensors[name] = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return tensors, metadata


def save(path, tensors, metadata):
    names = sorted(tensors)
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    inverse = {v: k for k, v in DTYPES.items()}
    for name in names:
        t = tensors[name].contiguous()
        blob = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": inverse[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(tmp, path)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else path + ".roundtrip.safetensors"
    tensors, metadata = load(path)
    config = json.loads(metadata["model"])
    print(f"{path}: {len(tensors)} tensors, model {config['name']}, step {metadata['step']}")
    if config["name"] in ("resnet18", "resnet34", "resnet50") and not config["small_input"]:
        try:
            import torchvision
        except ImportError:
            sys.exit(f"loading {config['name']} into torchvision needs python3-torchvision "
                     "(apt-get install python3-torchvision)")
        model = getattr(torchvision.models, config["name"])(num_classes=config["num_classes"])
        if config["in_channels"] != 3:
            model.conv1 = torch.nn.Conv2d(config["in_channels"], 64, 7, 2, 3, bias=False)
        # The model's own tensors: not the optimizer's, the pruner's, the reducer's or a rank's
        # run state (compressor residuals, random generator), and not the masks.
        def run_state(k):
            return (k.startswith(("optimizer.", "pruner.", "reducer.")) or k.endswith(".mask") or
                    (k.startswith("rank") and k.split(".")[0][4:].isdigit()))
        weights = {k: v for k, v in tensors.items() if not run_state(k)}
        missing, unexpected = model.load_state_dict(weights, strict=False)
        assert not unexpected, unexpected
        assert all(k.endswith("num_batches_tracked") for k in missing), missing
        model.eval()
        size = config["image_size"]
        logits = model(torch.zeros(1, config["in_channels"], size, size))
        print(f"loaded into torchvision.models.{config['name']}; logits {tuple(logits.shape)}")
    save(out, tensors, metadata)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
