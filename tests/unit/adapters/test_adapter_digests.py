"""Each shipped adapter's digest, pinned by value.

The digest covers api, version and rules table and is bound into every manifest, so a
refactor of the adapter code must leave it unchanged; a changed rules table is a new
adapter version, pinned here when it ships. The goldens' digests.json records the same
values; this test states them where a reviewer sees them.
"""

from __future__ import annotations

from turnledger.adapters.registry import ADAPTERS

SHIPPED_DIGESTS = {
    "anthropic-messages@0": "sha256:bd5aee655938be327b518683e8e3542b22802a3e1322d55bb0fa2028fbb10534",
    "anthropic-messages@1": "sha256:7a8b1767f22b2302298f0026abfd2f07416a0169eea21c22ff169fecdedc2405",
    "bedrock-converse@1": "sha256:3780ca26ba6c20e5f1a51a98a5ab5521807214608e0ffe11fb28f13c3229c02a",
    "gemini@1": "sha256:a9c85358a5c66ef23d711fd4531589498a97732eaade75d6f87b4475c0df1e9e",
    "openai-chat@1": "sha256:ad710e25e53b2048e4f2d591d09499d502644eaf3af359a5b3b54f8494691722",
    "openai-responses@1": "sha256:782e58ddfb9eb074c171336e6a63a9096db4a800ea3e52f5039bca1ca5f98dda",
    # version 2: call ids each API accepts (mapped, deterministically, when another provider minted them)
    "anthropic-messages@2": "sha256:4880948a692d9086af84b21be7fba4ae430494e33e4f8c92764104c3574e596d",
    "gemini@2": "sha256:322e022b83d5cadc81bb0847ebc78ee61be1cee2c2954af376c87269636da046",
    "openai-chat@2": "sha256:8d9a704f3eb7bc36be0f7707f0536205768708ea71bb1738de56260f31d4072f",
    "openai-responses@2": "sha256:790c59f5ff2da467f66b9eb671cdb184922307fbb4021287358706f2483754aa",
    # version 3: `reasoning` and `include` policy (a reasoning model's items sent back)
    "openai-responses@3": "sha256:df57156119dd6f5dac187014fa26bc2ead60d0b5f08ae2416222632aaa24f991",
    # version 3: Gemini's stand-in signature on the first unsigned call of every assistant run, and the
    # `thinking_config` policy (generationConfig.thinkingConfig)
    "gemini@3": "sha256:6d63b27021c466eec622051cf1c648392e775413755a21b15dc1ecb960aae169",
    # version 4: an unsigned reasoning item referenced by its rs_ id when stored, its encrypted content
    # asked for when not
    "openai-responses@4": "sha256:2a6ddef3374b2cd5c64871e71d4afc834ee58f17a171d74a9b5101c4eb4ad257",
    # version 3: the policy's `thinking`, left out in a tool loop that did not open with thinking it sends
    "anthropic-messages@3": "sha256:160cddca5cb18aa124242fd478afc8842bef62c4c7ec0bbf043ee58c9138dabb",
    # version 2: `additionalModelRequestFields` (Claude's thinking), its `thinking` left out in a tool loop
    # that did not open with thinking it sends
    "bedrock-converse@2": "sha256:c76895ab59f75a54afa0e22499e732064e248b37914e0239fab30e3ae6c2d230",
}


def test_every_shipped_adapter_keeps_its_digest() -> None:
    assert {adapter_id: adapter.digest for adapter_id, adapter in ADAPTERS.items()} == SHIPPED_DIGESTS
