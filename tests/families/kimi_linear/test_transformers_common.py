"""transformers' common model tests (ModelTesterMixin from the 5.23 sdist, see transformers_suite.py) on our classes,
in standard, block and full mode. Skips name the deliberate difference they stand for."""
import unittest
from unittest import mock

import torch
from transformers import GenerationMixin
from transformers.models.kimi_linear import modeling_kimi_linear

from hf_attnres import KimiLinearAttnResForCausalLM, KimiLinearAttnResModel
from hf_attnres.families.kimi_linear import modeling_kimi_linear_attnres as modeling_attnres
from hf_attnres.families.kimi_linear.conversion_mapping import LoadOnlyRenaming
from hf_attnres.families.kimi_linear.k3.layout import LoadOnlyConverter
from hf_attnres.utils.tiny import tiny_config
from tests.helpers.transformers_suite import declare_model, load_common

common = load_common()
declare_model(common, "kimi_linear_attnres", "KimiLinearAttnResModel", "KimiLinearAttnResForCausalLM")


class AttnResModelTester:
    """Tiny configs and inputs in the shape transformers' mixins expect (as their causal-LM testers provide).

    A Kimi Linear hybrid, as small as the mixins ask (2 layers): a KDA layer with a dense MLP, then an MLA layer with
    MoE. Block mode uses one layer per block, so the second layer opens a new block."""

    batch_size = 2
    seq_length = 7
    is_training = True
    vocab_size = 99
    hidden_size = 32
    num_hidden_layers = 2
    num_attention_heads = 4

    def __init__(self, parent, mode: str):
        self.parent = parent
        self.mode = mode

    def get_config(self):
        return tiny_config(
            self.mode, block_size=1, num_layers=self.num_hidden_layers, vocab_size=self.vocab_size,
            hidden_size=self.hidden_size, intermediate_size=37, moe_intermediate_size=16,
            layer_types=["linear_attention", "full_attention"], first_k_dense_replace=1, family="kimi_linear",
        )

    def prepare_config_and_inputs_for_common(self):
        config = self.get_config()
        input_ids = common.ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = torch.tril(torch.ones_like(input_ids))  # right padding: row i keeps its first i + 1 tokens
        return config, {"input_ids": input_ids, "attention_mask": attention_mask}


class _AttnResCommonTests(common.ModelTesterMixin):
    all_model_classes = (KimiLinearAttnResModel, KimiLinearAttnResForCausalLM)
    mode = None
    test_torch_exportable = False  # the export battery lives in tests/exporters/, absent from the sdist
    # the mixin dates models by a copyright line in the config file (ours has none): check our _init_weights anyway
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self):
        self.model_tester = AttnResModelTester(self, self.mode)

    def test_generation_tester_mixin_inheritance(self):
        self.skipTest("tests/generation/ (GenerationTesterMixin) is not in transformers' sdist: generate() is "
                      "tested by tests/families/kimi_linear/test_modeling_generation.py")

    def test_attention_outputs(self):
        self.skipTest("Kimi Linear's KDA layers have no attention map, so there are fewer maps than layers (as in "
                      "transformers' KimiLinear); MLA maps are checked by test_retain_grad_hidden_states_attentions")

    def test_reverse_loading_mapping(self):
        # Deliberate: a LoadOnlyRenaming reads the dense-MLP names transformers' KimiLinearForCausalLM writes, and a
        # LoadOnlyConverter reads Kimi K3's MXFP4 experts / padded A_log; saving writes Moonshot's bf16 names, so no
        # saved key matches them. The latent-MoE renames (`routed_expert_*`) exist only in K3 models, which this
        # tester is not (tests/test_k3_model.py round-trips them). Every other conversion is checked as the mixin does.
        mapping = common.get_model_conversion_mapping
        load_only = {LoadOnlyRenaming.__name__, LoadOnlyConverter.__name__}

        def saved_conversions(*args, **kwargs):
            # by class name: a saved folder loaded as remote code earlier in this process registers its own copies
            return [c for c in mapping(*args, **kwargs) if type(c).__name__ not in load_only
                    and not any("routed_expert_" in p for p in c._original_source_patterns)]

        with mock.patch.object(common, "get_model_conversion_mapping", saved_conversions):
            super().test_reverse_loading_mapping()

    def test_moe_models_record_router_logits(self):
        # The mixin finds MoE models by grepping their module for transformers' experts decorator; ours imports
        # transformers' own decorated KimiLinearExperts, so it is shown that module's source instead.
        getsource = common.inspect.getsource

        def source(obj):
            return getsource(modeling_kimi_linear) if obj is modeling_attnres else getsource(obj)

        with mock.patch.object(common.inspect, "getsource", source):
            super().test_moe_models_record_router_logits()

    def test_hidden_states_from_config_and_by_index(self):
        # The mixin's index-selection test skips models that collect hidden states themselves (ours: what a layer
        # adds to the depth stream depends on the mode), so the same contract is checked here.
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        model = KimiLinearAttnResForCausalLM(config).eval()
        with torch.no_grad():
            every = model(**inputs, output_hidden_states=True).hidden_states
            some = model(**inputs, output_hidden_states=[0, -1]).hidden_states
            model.config.output_hidden_states = True
            from_config = model(**inputs).hidden_states
        self.assertEqual(len(every), config.num_hidden_layers + 1)
        self.assertEqual([h is None for h in some], [False] + [True] * (len(every) - 2) + [False])
        for a, b, c in zip(every, some, from_config):
            torch.testing.assert_close(a, c)
            if b is not None:
                torch.testing.assert_close(a, b)

    def test_generation_mixin_is_a_direct_base(self):
        self.assertIn(GenerationMixin, KimiLinearAttnResForCausalLM.__bases__)


class StandardCommonTest(_AttnResCommonTests, unittest.TestCase):
    mode = "standard"


class BlockCommonTest(_AttnResCommonTests, unittest.TestCase):
    mode = "block"


class FullCommonTest(_AttnResCommonTests, unittest.TestCase):
    mode = "full"
