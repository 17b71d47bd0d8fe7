"""The lab's baseline with automatic mixed precision (AMP): the same training, three changes.

    python lab/amp_training.py                        # the lab: 5 epochs of CIFAR-10 (downloaded to ./data)
    python lab/amp_training.py --synthetic --subset 2048 --epochs 1   # a quick check, no download
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.optim as optim
import torchvision
import torchvision.transforms as transforms


class SimpleCNN(nn.Module):
    """Two conv/ReLU/maxpool blocks, then two linear layers: 32x32 RGB images in, 10 class scores out."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.classifier = nn.Sequential(
            nn.Linear(64 * 8 * 8, 512),
            nn.ReLU(),
            nn.Linear(512, 10),
        )

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def make_trainloader(synthetic: bool, subset: int | None, batch_size: int):
    """CIFAR-10's training images as normalised tensors in shuffled batches, loaded by 4 worker processes."""
    transform = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]
    )
    if synthetic:
        # Random CIFAR-shaped images: the same pipeline without a download (the loss will not fall).
        trainset = torchvision.datasets.FakeData(50_000, (3, 32, 32), 10, transform=transform)
    else:
        trainset = torchvision.datasets.CIFAR10(root="./data", train=True, download=True, transform=transform)
    if subset:
        trainset = torch.utils.data.Subset(trainset, range(min(subset, len(trainset))))
    return torch.utils.data.DataLoader(trainset, batch_size=batch_size, shuffle=True, num_workers=4)


def main():
    parser = argparse.ArgumentParser(description="Train the lab's CNN on CIFAR-10 with AMP and time it.")
    parser.add_argument("--epochs", type=int, default=5, help="passes over the training set (the lab: 5)")
    parser.add_argument("--batch-size", type=int, default=256, help="images per step (the lab: 256)")
    parser.add_argument("--synthetic", action="store_true", help="random images instead of downloading CIFAR-10")
    parser.add_argument("--subset", type=int, default=None, help="train on the first N images only")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    trainloader = make_trainloader(args.synthetic, args.subset, args.batch_size)
    model = SimpleCNN().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    # fp16 on a GPU, as in the lab; bf16 on a CPU (fast with AMX or AVX512-BF16), where fp16 is slow on most CPUs.
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16

    # AMP change 1: a GradScaler keeps small fp16 gradients from underflowing (bf16 needs none: disabled).
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)

    print(f"Starting AMP training ({amp_dtype}) on {device}...")
    start_time = time.time()
    for epoch in range(args.epochs):
        running_loss = 0.0
        for i, (inputs, labels) in enumerate(trainloader):
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=True)

            # AMP change 2: run the forward pass and the loss under autocast.
            with torch.autocast(device.type, dtype=amp_dtype):
                outputs = model(inputs)
                loss = criterion(outputs, labels)

            # AMP change 3: backward on the scaled loss; step and update through the scaler.
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

            running_loss += loss.item()
            if i % 100 == 99:  # print the mean loss every 100 batches
                print(f"[Epoch: {epoch + 1}, Batch: {i + 1:5d}] loss: {running_loss / 100:.3f}")
                running_loss = 0.0

    if device.type == "cuda":
        torch.cuda.synchronize()  # GPU work runs asynchronously: wait for it before reading the clock
    total_time = time.time() - start_time
    print(f"Finished AMP training in {total_time:.2f} seconds")


if __name__ == "__main__":
    main()
