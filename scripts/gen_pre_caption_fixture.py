"""Expected outputs of BLIP's `pre_caption` (the caption normalisation of BLIP's COCO retrieval
evaluation, kept in RoCOCO's `blip/data/utils.py`), for the Rust port's test.

The function is run from a checkout of github.com/pseulki/rococo (or of salesforce/BLIP):
its module imports torch, torchvision, pycocotools and BLIP's distributed helpers, which
`pre_caption` never uses, so whatever of them is not installed is stubbed.

    python scripts/gen_pre_caption_fixture.py /path/to/rococo/blip/data/utils.py
"""

import importlib.util
import json
import os
import sys
import types

class _Stub(types.ModuleType):
    """A stand-in for a module `pre_caption` never touches: every attribute is None."""

    __path__ = []

    def __getattr__(self, name):
        return None


class _StubFinder:
    """Imports every module that is not installed as a stub."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return _Stub(spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.append(_StubFinder())

spec = importlib.util.spec_from_file_location("blip_data_utils", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

CAPTIONS = [
    "A man riding a wave on top of a surfboard.",
    "  Two dogs (one brown) play: fetch!  ",
    "A \"quoted\" word; a #tag ~tilde* and more...",
    "Tabs\tstay single but  double  spaces\t\tcollapse\n",
    "ÉCOLE Ünïcode Straße ΣΟΦΙΑ",
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four "
    "twenty-five twenty-six twenty-seven twenty-eight twenty-nine thirty thirty-one thirty-two",
    "...",
    "",
    "a  .  b",
    "line one\nline two\n\n",
]

out = [{"caption": c, "max_words": m, "expected": module.pre_caption(c, m)} for c in CAPTIONS for m in (30, 5)]
path = os.path.join(os.path.dirname(__file__), "..", "crates", "benchctl-suites", "tests", "fixtures", "blip_pre_caption.json")
with open(path, "w") as f:
    json.dump(out, f, indent=1, ensure_ascii=False)
    f.write("\n")
