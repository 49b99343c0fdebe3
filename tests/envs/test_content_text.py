"""One reader of message content as text, for chat messages and for the agent endpoint's Responses/Messages content."""

from __future__ import annotations

from skillopt_envs.chat import content_text


def test_chat_content_reads_texts_and_shows_each_image_as_a_placeholder() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:x"}}, "b"]
    assert content_text(parts) == "a\n[image]\nb"
    assert content_text(parts, image="<img>") == "a\n<img>\nb"
    assert content_text(None) == "" and content_text("plain") == "plain" and content_text(3) == "3"


def test_responses_and_messages_parts_give_their_text_and_drop_images_when_asked() -> None:
    parts = [
        {"type": "input_text", "text": "question"},
        {"type": "output_text", "text": "answer"},
        {"type": "input_image", "image_url": "data:x"},
        {"type": "image", "source": {"type": "base64", "data": "AA"}},
        {"type": "tool_result", "content": [{"type": "text", "text": "nested"}]},
        {"type": "unknown_kind", "data": 1},
    ]
    assert content_text(parts, image="") == "question\nanswer\nnested"
    assert content_text(parts) == "question\nanswer\n[image]\n[image]\nnested"
