"""The attacker's last step: the gradient-match yardstick on every result, and a median filter kept where it helps."""

import torch

from adversary.postprocessing import finish, median_filter
from adversary.view import Reconstruction


def test_the_median_filter_removes_isolated_specks_and_keeps_flat_regions():
    image = torch.full((1, 1, 6, 6), 0.5)
    specked = image.clone()
    specked[0, 0, 2, 3] = 1.0
    assert torch.equal(median_filter(specked), image)
    assert median_filter(torch.rand(2, 3, 4, 5)).shape == (2, 3, 4, 5)


def test_a_filter_is_kept_only_where_it_lowers_the_gradient_match(monkeypatch):
    import adversary.postprocessing as postprocessing

    # a yardstick that prefers smooth images: the filter wins on the noisy result, not on the smooth one
    def roughness(views, recs, device):
        return [float((rec.images[..., 1:] - rec.images[..., :-1]).abs().mean()) for rec in recs]

    monkeypatch.setattr(postprocessing, "_matches", roughness)
    noisy = Reconstruction(torch.rand(1, 1, 8, 8), torch.zeros(1, dtype=torch.long), 0.0, (), 1, 0.0)
    flat = Reconstruction(torch.zeros(1, 1, 8, 8), torch.zeros(1, dtype=torch.long), 0.0, (), 1, 0.0)
    cleaned, kept = finish([None, None], [noisy, flat], torch.device("cpu"))
    assert cleaned.postprocess == "median3" and torch.equal(cleaned.images, median_filter(noisy.images))
    assert cleaned.gradient_match < roughness(None, [noisy], None)[0]
    assert kept.postprocess is None and kept.gradient_match == 0.0 and torch.equal(kept.images, flat.images)


def test_a_result_the_yardstick_cannot_simulate_is_kept_as_it_came(monkeypatch):
    import adversary.postprocessing as postprocessing

    monkeypatch.setattr(postprocessing, "_matches", lambda views, recs, device: [None] * len(recs))
    rec = Reconstruction(torch.rand(1, 1, 8, 8), torch.zeros(1, dtype=torch.long), 0.0, (), 1, 0.0)
    (out,) = finish([None], [rec], torch.device("cpu"))
    assert out.gradient_match is None and out.postprocess is None and torch.equal(out.images, rec.images)
