import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.models import build_model, list_models, model_params

SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]


def test_registry_lists_every_architecture():
    assert {"mlp", "mnist-cnn", "cifar-cnn", "resnet18"} <= set(list_models())


def test_unknown_architecture_suggests_and_lists():
    with pytest.raises(ConfigError) as err:
        build_model("mlpp", (4,), 2)
    msg = str(err.value)
    assert "'mlp'" in msg and "resnet18" in msg and "cifar-cnn" in msg


def test_unknown_parameter_names_valid_ones():
    with pytest.raises(ConfigError, match="hidden"):
        build_model("mlp", (4,), 2, hiden=3)
    assert model_params("mlp") == ["hidden", "activation", "dropout"]


@pytest.mark.parametrize("arch", ["mlp", "mnist-cnn", "cifar-cnn"])
@pytest.mark.parametrize("shape", SHAPES)
def test_output_shapes(arch, shape):
    model = build_model(arch, shape, 10).eval()
    with torch.no_grad():
        out = model(torch.randn(4, *shape))
    assert out.shape == (4, 10)


@pytest.mark.parametrize("arch", ["mnist-cnn", "cifar-cnn"])
def test_cnns_accept_two_dimensional_images(arch):
    model = build_model(arch, (8, 8), 3).eval()
    assert model(torch.randn(2, 8, 8)).shape == (2, 3)


def test_resnet18_cifar_shape():
    model = build_model("resnet18", (3, 32, 32), 100).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 100)
    assert model.conv1.kernel_size == (3, 3)
    widths = [stage[0].conv1.out_channels for stage in model.layers]
    assert widths == [64, 128, 256, 512]
    assert [len(stage) for stage in model.layers] == [2, 2, 2, 2]


def test_mlp_hidden_default_and_tanh():
    model = build_model("mlp", (4, 5), 3)
    assert model.hidden.out_features == 40
    model = build_model("mlp", (40,), 100, hidden=128, activation="tanh")
    assert (model.hidden.in_features, model.hidden.out_features) == (40, 128)
    assert isinstance(model.act, torch.nn.Tanh) and model.head.out_features == 100
    with pytest.raises(ConfigError, match="activation"):
        build_model("mlp", (4,), 2, activation="gelu")


def test_mnist_cnn_is_unpadded_on_28x28_and_padded_on_small():
    assert build_model("mnist-cnn", (1, 28, 28), 10).classifier[0].in_features == 50 * 4 * 4
    assert build_model("mnist-cnn", (1, 8, 8), 10).classifier[0].in_features == 50 * 2 * 2
    with pytest.raises(ConfigError, match="padding"):
        build_model("mnist-cnn", (1, 8, 8), 10, padding=0)


def test_image_architectures_reject_bad_shapes():
    with pytest.raises(ConfigError, match="mlp"):
        build_model("cifar-cnn", (40,), 2)
    with pytest.raises(ConfigError, match="channels-first"):
        build_model("resnet18", (32, 32, 3), 10)


@pytest.mark.parametrize(("arch", "shape"), [("mlp", (1, 8, 8)), ("cifar-cnn", (3, 8, 8))])
def test_dropout_is_off_by_default_and_drops_in_training_only(arch, shape):
    torch.manual_seed(0)
    plain = build_model(arch, shape, 10)
    torch.manual_seed(0)
    dropped = build_model(arch, shape, 10, dropout=0.5)
    # Same parameters (dropout has none), so dropout never changes what the cache stores.
    assert plain.state_dict().keys() == dropped.state_dict().keys()
    assert isinstance(plain.drop, torch.nn.Identity)
    assert isinstance(dropped.drop, torch.nn.Dropout) and dropped.drop.p == 0.5
    x = torch.randn(3, *shape)
    with torch.no_grad():
        assert torch.equal(plain.eval()(x), dropped.eval()(x))
        dropped.train()
        assert not torch.equal(dropped(x), dropped(x))  # fresh masks on every call


@pytest.mark.parametrize("bad", [1.0, -0.2, "0.5", True])
def test_bad_dropout_rates(bad):
    with pytest.raises(ConfigError, match="dropout"):
        build_model("mlp", (4,), 2, dropout=bad)
    with pytest.raises(ConfigError, match="dropout"):
        build_model("cifar-cnn", (1, 8, 8), 2, dropout=bad)
