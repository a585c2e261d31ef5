from gateway.app.app import App
from tests.fakes import FakeLLM, MemoryChannel, inbound


async def test_message_gets_model_reply(app: App, llm: FakeLLM, channel: MemoryChannel) -> None:
    llm.enqueue_text("hello back")
    await app.router.submit(inbound("hello"))
    assert channel.texts() == ["hello back"]
