"""The engine's image features against transformers' on the same model and images: the mean of
the vision tower's merged tokens, and the decoder's final hidden state at the token that closes
the image. transformers' vectors come from benches/confident_learning_features.py, the script
the benchmark page's comparison of the two definitions uses.

The model is the tiny Qwen2-VL the sample's releases use (fixtures/vlm/train_tiny.py), the images
the embedded sample's (fixtures/gen_sample.py).
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from helpers import BIN, ROOT

sys.path.insert(0, str(Path(ROOT) / "benches"))
from confident_learning_features import vectors  # noqa: E402

MODEL = Path(ROOT) / "fixtures" / "vlm" / "trained" / "qwen2_vl"
SAMPLE = Path(ROOT) / "fixtures" / "sample"


@pytest.fixture(scope="module")
def reference():
    images = sorted(p.name for p in (SAMPLE / "images").glob("*.png"))[:6]
    return images, vectors(MODEL, SAMPLE, images)


@pytest.mark.parametrize("definition", ["vision_tower_mean", "decoder_prefix_end"])
def test_the_engines_features_equal_transformers(tmp_path, reference, definition):
    out = tmp_path / "features.parquet"
    run = subprocess.run([BIN, "features", str(Path(ROOT) / "specs" / "s1a.yaml"), "--definition", definition,
                          "--out", str(out), "--no-progress", "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"({definition}," in run.stdout
    table = pq.read_table(out).to_pandas().set_index("image_index")
    assert pq.read_metadata(out).metadata[b"bpals.features"] == definition.encode()
    images, expected = reference
    engine = np.stack(table.loc[images].features.to_numpy())
    want = expected[definition]
    assert engine.shape == want.shape
    # f32 on both sides; the kernels differ (libtorch's CPU kernels beside transformers' own).
    assert np.abs(engine - want).max() <= 1e-4 * max(1.0, np.abs(want).max())
    # The two definitions are different vectors.
    other = "decoder_prefix_end" if definition == "vision_tower_mean" else "vision_tower_mean"
    assert not np.allclose(want, expected[other][:, :want.shape[1]])
