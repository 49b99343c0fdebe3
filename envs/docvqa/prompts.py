"""The target's messages for DocVQA, in this project's words.

System: a one-line role, the skill section (left out when the skill is blank), what the input is, four
rules (ground the answer in what is visible; prefer exact spans, numbers, dates and names; invent nothing;
choose the best-supported of near-matches) and the answer-tag format. User: one multimodal message, the
question with the answer-format sentence as text, then the page image as a `data:` URL.
"""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path

from skillopt_envs.chat import ChatMessage, ContentPart, ImageURL

SYSTEM_TEMPLATE = """You are an expert agent for answering questions about scanned and digital documents from their images.

{skill_section}You receive the image of one document page and a question about it. Read the page carefully and
answer from what it shows, as briefly as the question allows.

Rules:
- Base the answer on content that is visible on the page.
- Prefer the exact words, numbers, dates and names as they are written on the page.
- Do not invent anything the page does not show.
- When several candidates look alike, pick the one the page supports best.

Give your final answer inside <answer>...</answer> tags."""

ANSWER_SENTENCE = "Write your final answer inside <answer>...</answer> tags."
RETRY_TEXT = (
    "Your reply had no <answer> tags. Look at the same page image once more and give your final answer "
    "inside <answer>...</answer> tags."
)
# what replaces the image for a target that sees no images (env.options.page_input=text)
TEXT_LAYER_HEADER = "The page image cannot be shown to you. This is the text on the page, line by line:"
NO_TEXT_LAYER = "The page image cannot be shown to you, and no text of the page is available."


def skill_section(skill: str) -> str:
    body = (skill or "").strip()
    return f"## Skill\n{body}\n\n" if body else ""


def system_prompt(skill: str) -> str:
    return SYSTEM_TEMPLATE.format(skill_section=skill_section(skill))


def user_text(question: str) -> str:
    return f"{question}\n\n{ANSWER_SENTENCE}"


def image_mime(path: str) -> str:
    return mimetypes.guess_type(path)[0] or "image/png"


def image_part(path: str, detail: str = "auto") -> ContentPart:
    """The page as an image_url part with a base64 `data:` URL; `detail` only when set and not auto."""
    b64 = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    url: ImageURL = {"url": f"data:{image_mime(path)};base64,{b64}"}
    if detail and detail != "auto":
        url["detail"] = detail
    return {"type": "image_url", "image_url": url}


def text_layer_part(text: str) -> ContentPart:
    body = text.strip()
    return {"type": "text", "text": f"{TEXT_LAYER_HEADER}\n{body}" if body else NO_TEXT_LAYER}


def user_message(text: str, page_part: ContentPart) -> ChatMessage:
    return {"role": "user", "content": [{"type": "text", "text": text}, page_part]}
