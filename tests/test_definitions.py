import json

import pytest
import torch

from sdk import definitions
from sdk.errors import BadInputError
from tests.helpers import ATTENTION, INDEXER, MOE


def test_three_definitions_load_and_compile_their_reference():
    assert definitions.names() == sorted([ATTENTION, INDEXER, MOE])
    for name in definitions.names():
        d = definitions.load(name)
        assert d.name == name
        assert callable(definitions.reference(name))


def test_json_embeds_the_reference_file_verbatim():
    for name in definitions.names():
        raw = json.loads((definitions.HERE / f"{name}.json").read_text())
        assert raw["reference"] == (definitions.HERE / f"{name}.py").read_text(), \
            f"{name}: run `python -m sdk.definitions` to re-embed the edited reference"


def test_unknown_definition_is_one_line_error():
    with pytest.raises(BadInputError, match="unknown definition"):
        definitions.load("no_such_op")


@pytest.mark.parametrize("text,match", [("{not json", "not a readable JSON"), ("[1, 2]", "JSON object"),
                                        ('{"name": "x", "bogus": 1}', "unknown definition field"),
                                        ('{"name": "x"}', "invalid definition")])
def test_malformed_definition_files(tmp_path, text, match):
    path = tmp_path / "d.json"
    path.write_text(text)
    with pytest.raises(BadInputError, match=match) as info:
        definitions.parse(path)
    assert "\n" not in str(info.value)


def test_reference_with_syntax_error_is_rejected(tmp_path):
    raw = json.loads((definitions.HERE / f"{INDEXER}.json").read_text())
    raw["reference"] = "def run(:\n"
    path = tmp_path / "d.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(BadInputError):
        definitions.parse(path)


def test_attention_reference_handles_padding_and_empty_rows():
    torch.manual_seed(0)
    q_nope, q_pe = torch.randn(2, 16, 512).bfloat16(), torch.randn(2, 16, 64).bfloat16()
    ckv, kpe = torch.randn(4, 64, 512).bfloat16(), torch.randn(4, 64, 64).bfloat16()
    idx = torch.full((2, 2048), -1, dtype=torch.int32)
    idx[0, :3] = torch.tensor([5, 70, 200])
    out, lse = definitions.reference(ATTENTION)(q_nope, q_pe, ckv, kpe, idx, 0.1)
    assert torch.all(out[1] == 0) and torch.all(torch.isneginf(lse[1]))
    rows = ckv.view(-1, 512)[[5, 70, 200]].float()
    logits = (q_nope[0].float() @ rows.T + q_pe[0].float() @ kpe.view(-1, 64)[[5, 70, 200]].float().T) * 0.1
    torch.testing.assert_close(lse[0], torch.logsumexp(logits, -1) / torch.log(torch.tensor(2.0)))
    torch.testing.assert_close(out[0].float(), (torch.softmax(logits, -1) @ rows).bfloat16().float())
