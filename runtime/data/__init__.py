"""Data: sets held in memory as tensors (`tensors.py`), read from scikit-learn, torchvision's formats or
folders of images (`sets.py`, `image_files.py`), and augmented a batch at a time (`augment.py`)."""
