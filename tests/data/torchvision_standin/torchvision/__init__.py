"""A stand-in for torchvision: only `transforms.Compose/ToTensor/Normalize`."""
