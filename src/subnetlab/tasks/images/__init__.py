"""Image classification data: image sets, folders, 16-class ImageNet, mean pooling, generated shapes."""
