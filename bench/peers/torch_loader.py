#!/usr/bin/python3
"""The torchvision side of bench/run_loader.sh: images per second of ImageFolder with torchvision's
ImageNet transforms (RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize; or with --eval
Resize and CenterCrop) through a DataLoader, batched as a training run takes them. --workers 0
loads in this process (one core), N in N worker processes. The files are read once first, so
the page cache serves them, as it does pactrain's bench-loader.
Prints one line: "torchvision workers W images N seconds S images_per_s R".
Usage: torch_loader.py DIR [--workers W] [--batch B] [--image-size S] [--batches N] [--eval]"""
import argparse
import os
import time

import torch
import torchvision
from torchvision import transforms

parser = argparse.ArgumentParser()
parser.add_argument("dir")
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--image-size", type=int, default=224)
parser.add_argument("--batches", type=int, default=8)
parser.add_argument("--eval", action="store_true")
args = parser.parse_args()

# One thread per process: the loader's cost per core is what is compared.
torch.set_num_threads(1)
size = args.image_size
normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
if args.eval:
    transform = transforms.Compose([transforms.Resize(size * 256 // 224), transforms.CenterCrop(size),
                                    transforms.ToTensor(), normalize])
else:
    transform = transforms.Compose([transforms.RandomResizedCrop(size),
                                    transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                    normalize])
dataset = torchvision.datasets.ImageFolder(os.path.join(args.dir, "train"), transform)
for path, _ in dataset.samples:  # warm the page cache
    with open(path, "rb") as f:
        f.read()
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True,
                                     num_workers=args.workers, drop_last=True,
                                     persistent_workers=args.workers > 0)
assert len(loader) > args.batches, f"{len(loader)} batches; --batches {args.batches} needs one more"
batches = iter(loader)
next(batches)  # warm-up: workers started
start = time.perf_counter()
for _ in range(args.batches):
    next(batches)
seconds = time.perf_counter() - start
images = args.batches * args.batch
print(f"torchvision workers {args.workers} images {images} seconds {seconds:.3f} "
      f"images_per_s {images / seconds:.1f}")
