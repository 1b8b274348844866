"""The data sets' readers, one module per source, each registering its reader (and its config model) in
``DATASETS`` (``fedsim.data.registry``): every module here is imported, so a new source is one new file.

A reader reads one source into an ``ImageDataset`` (or a ``TextDataset``) at its native size, and does no
subsetting, no test split and no resizing (except ``imagefolder`` when data.image_size is set, since its files
may differ in size and must match before they can be stacked): the pipeline in ``fedsim.data.load``
(``load_dataset``) does those the same way for every source. Heavy libraries (torchvision, scikit-image,
scikit-learn, PIL, datasets) are imported inside the readers so that listing data sets and validating configs
stays fast. ``arrays`` holds what the readers share.
"""

from fedsim.core.registry import import_submodules

import_submodules(__name__, __path__)
