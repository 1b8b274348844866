"""A malicious server: the imprint modification (Robbing the Fed) and its closed-form read-out."""

import pytest
import torch
from torch import nn

from adversary.attacks.rtf import attack, read_out
from adversary.inversion.options import AttackOptions
from adversary.inversion.requirements import AttackSetting
from adversary.modifications import MODIFICATIONS
from adversary.modifications.base import PublicData
from adversary.modifications.served import describe, rebuild
from adversary.registry import ATTACKS
from adversary.view import AttackerView, LocalTraining
from clients.client_app import architecture_difference
from fedsim.models.build import uniform_init_

SHAPE = (1, 8, 8)
LR = 0.1


def agreed_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, 10))


def confident_model() -> nn.Module:
    """An honest global model as sharp as a trained one: DLG's uniform init, its output layer scaled up (most
    samples' first-logit gradient p_0 - [y = 0] is then tiny)."""
    model = uniform_init_(agreed_model())
    with torch.no_grad():
        model[3].weight.mul_(30)
    return model


def imprinted(bins: int, public: torch.Tensor, honest: nn.Module | None = None, **options) -> nn.Module:
    config = MODIFICATIONS.config("imprint")(bins=bins, **options)
    model = agreed_model() if honest is None else honest
    return MODIFICATIONS.get("imprint")(config, model, SHAPE, 10, PublicData(public, "test"), seed=0)


def one_step(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """A client's weights after one SGD step on its batch (what it sends)."""
    trained = {k: v.detach().clone() for k, v in model.state_dict().items()}
    loss = nn.functional.cross_entropy(model(images), labels)
    for (name, _), grad in zip(model.named_parameters(), torch.autograd.grad(loss, list(model.parameters()))):
        trained[name] = trained[name] - LR * grad
    return trained


def view_of(model: nn.Module, observed: dict, num_samples: int, bounded: bool = False) -> AttackerView:
    return AttackerView(
        round=1,
        tap="server",
        target="aggregate",
        model=model,
        global_state={k: v.detach().clone() for k, v in model.state_dict().items()},
        observed_state=observed,
        input_shape=SHAPE,
        num_classes=10,
        num_samples=num_samples,
        local_training=LocalTraining(lr=LR, local_steps=1, batch_size=num_samples),
        input_bounds=(torch.zeros(1), torch.ones(1)) if bounded else None,
    )


def exactly_recovered(recovered: torch.Tensor, images: torch.Tensor, tolerance: float = 1e-4) -> int:
    """How many of ``images`` some reconstruction matches to ``tolerance`` (largest pixel error)."""
    if len(recovered) == 0:
        return 0
    errors = (recovered.flatten(1)[:, None].double() - images.flatten(1)[None].double()).abs().amax(dim=2)
    return int((errors.min(dim=0).values < tolerance).sum())


def public_images(count: int = 256) -> torch.Tensor:
    """Calibration images whose brightness spans [0, 1] evenly (as the server's public data would)."""
    generator = torch.Generator().manual_seed(9)
    return (
        torch.rand(count, 1, 1, 1, generator=generator) + 0.05 * torch.randn(count, *SHAPE, generator=generator)
    ).clamp(0, 1)


def distinct_brightness(count: int, seed: int = 0) -> torch.Tensor:
    """Images whose mean brightness is spread out: none share an imprint bin."""
    generator = torch.Generator().manual_seed(seed)
    levels = torch.linspace(0.15, 0.85, count)
    return (levels[:, None, None, None] + 0.1 * (torch.rand(count, *SHAPE, generator=generator) - 0.5)).clamp(0, 1)


def test_three_images_in_sixty_four_bins_come_back_exactly():
    public = public_images()
    model = imprinted(64, public)
    images = distinct_brightness(3)
    view = view_of(model, one_step(model, images, torch.tensor([0, 3, 7])), 3)
    recovered, _ = read_out(view, threshold=1e-3)
    assert len(recovered) == 3
    errors = torch.cdist(recovered.flatten(1).double(), images.flatten(1).double()).min(dim=0).values
    assert errors.max() < 1e-4


def test_labels_are_the_updates_multiset_with_class_zero_on_its_negative_bin():
    public, images, labels = public_images(), distinct_brightness(4, seed=5), torch.tensor([3, 0, 7, 3])
    model = imprinted(64, public)
    view = view_of(model, one_step(model, images, labels), 4, bounded=True)
    (reconstruction,) = attack([view], AttackOptions(name="rtf"), seed=0, device=torch.device("cpu"))
    assert sorted(reconstruction.labels.tolist()) == [0, 3, 3, 7]
    closest = torch.cdist(images[1:2].flatten(1), reconstruction.images.flatten(1)).argmin()
    assert reconstruction.labels[closest] == 0  # its bin's gradient p_0 - 1 is the one negative


def test_the_aggregate_of_several_clients_is_read_out_as_well():
    public = public_images()
    model = imprinted(128, public)
    images = distinct_brightness(6, seed=1)
    first, second = (
        one_step(model, images[:3], torch.tensor([1, 2, 3])),
        one_step(model, images[3:], torch.tensor([4, 5, 6])),
    )
    average = {k: 0.25 * first[k] + 0.75 * second[k] for k in first}  # FedAvg with unequal shares
    recovered, _ = read_out(view_of(model, average, 6), threshold=1e-3)
    errors = torch.cdist(recovered.flatten(1).double(), images.flatten(1).double()).min(dim=0).values
    assert len(recovered) == 6 and errors.max() < 1e-4


def test_images_sharing_a_bin_come_back_as_one_blend():
    public = public_images()
    model = imprinted(8, public)
    images = torch.stack([torch.full(SHAPE, 0.5), torch.full(SHAPE, 0.5001), torch.full(SHAPE, 0.9)])
    view = view_of(model, one_step(model, images, torch.tensor([1, 2, 3])), 3, bounded=True)
    candidates, _ = read_out(view, threshold=1e-3)
    assert len(candidates) == 2  # the two nearly equal images fell into one bin
    (reconstruction,) = attack([view], AttackOptions(name="rtf"), seed=0, device=torch.device("cpu"))
    assert len(reconstruction.images) == 3  # the blend stands for both of its images
    assert exactly_recovered(reconstruction.images, images[2:]) == 1
    assert exactly_recovered(reconstruction.images, images[:2], tolerance=1e-3) == 2


def test_recovery_does_not_depend_on_the_honest_models_state():
    public, images, labels = public_images(), distinct_brightness(12, seed=2), torch.arange(12) % 10
    recovered = []
    for honest in (agreed_model(), confident_model()):
        model = imprinted(64, public, honest)
        candidates, _ = read_out(view_of(model, one_step(model, images, labels), 12), threshold=1e-3)
        recovered.append(exactly_recovered(candidates, images))
    assert recovered == [12, 12]  # behind the confident model's own weights: 2 of 12


def test_the_server_sets_every_weight_it_sends():
    public = public_images()
    served = [imprinted(16, public, honest).state_dict() for honest in (agreed_model(), confident_model())]
    assert all(torch.equal(served[0][name], served[1][name]) for name in served[0])
    with torch.no_grad():  # constant logits, p_0 about 1/2: every sample's gradient at the bins is about +-1/2
        logits = imprinted(16, public)(public[:8])
    assert torch.allclose(logits.softmax(dim=1)[:, 0], torch.full((8,), 0.5), atol=0.01)
    kept = imprinted(16, public, confident_model(), model_weights="global").model.state_dict()
    assert all(torch.equal(kept[name], value) for name, value in confident_model().state_dict().items())


def test_a_model_without_an_output_bias_is_refused_in_one_line():
    no_bias = nn.Sequential(nn.Flatten(), nn.Linear(64, 10, bias=False))
    with pytest.raises(ValueError, match=r"^imprint: model_weights = server needs an output bias of 10 entries;"):
        imprinted(8, public_images(), no_bias)


def test_the_served_model_round_trips_and_verification_sees_only_the_block():
    public = public_images()
    served = imprinted(16, public, confident_model())
    rebuilt = rebuild(describe(served), agreed_model(), SHAPE)
    rebuilt.load_state_dict(served.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(public[:4]), served(public[:4]))
    # the weights behind the block are the server's choice, which verification does not judge; the block is
    # another architecture, which it refuses
    assert architecture_difference(agreed_model(), rebuilt.model) is None
    assert architecture_difference(agreed_model(), rebuilt) == "a ImprintedModel instead of a Sequential"


def test_rtf_returns_as_many_images_as_the_update_holds_chosen_without_the_truth():
    public, images, labels = public_images(), distinct_brightness(8, seed=3), torch.arange(8)
    model = imprinted(64, public)
    observed = one_step(model, images, labels)
    generator = torch.Generator().manual_seed(0)
    for name in ("imprint.weight", "imprint.bias"):  # rounding noise: empty bins look populated
        observed[name] = observed[name] + 1e-5 * torch.randn(observed[name].shape, generator=generator)
    view = view_of(model, observed, 8, bounded=True)
    candidates, _ = read_out(view, threshold=1e-3)
    assert len(candidates) > 8
    (reconstruction,) = attack([view], AttackOptions(name="rtf"), seed=0, device=torch.device("cpu"))
    assert len(reconstruction.images) == len(reconstruction.labels) == 8
    assert exactly_recovered(reconstruction.images, images, tolerance=0.02) == 8


def test_the_gaussian_calibration_needs_no_data():
    model = imprinted(16, torch.empty(0, *SHAPE), calibration="gaussian", mean=4.0, std=1.0)
    assert model.imprint.bias.shape == (16,)


def test_rtf_is_refused_without_a_malicious_server_in_one_line():
    setting = AttackSetting(model=agreed_model(), model_name="mlp", input_shape=SHAPE, num_classes=10)
    reason = AttackOptions(name="rtf").refusal(setting)
    assert reason == "rtf needs a malicious server (adversary.server: malicious); the server is honest"
    assert ATTACKS.config("rtf").threat_model == "malicious"
