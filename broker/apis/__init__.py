"""One module per API. Importing this package imports every module in it, and each module
registers its handlers with `broker.registry.serves`, so adding an API is adding a file."""

import importlib
import pkgutil

for _info in pkgutil.iter_modules(__path__, __name__ + "."):
    importlib.import_module(_info.name)
