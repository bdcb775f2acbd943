"""llama-cpp-python's OpenAI-compatible server, rendering Gemma 3's own chat format for images.

llama-cpp-python (0.3.x) has no Gemma 3 chat handler: its multimodal handlers render their own
formats (`llava-1-5`: a system sentence, `USER: `, every image before the text, `ASSISTANT: `).
This starts the same server (`python -m llama_cpp.server`, every argument passed through) with
the `llava-1-5` handler's format replaced by Gemma 3's, as `Gemma3Processor` renders a user
turn: `<start_of_turn>user\\n`, the message's items in their order (text trimmed; an image as
`\\n\\n`, the image, `\\n\\n`: llama.cpp's Gemma 3 projector adds `<start_of_image>` and
`<end_of_image>` around it, the processor's `\\n\\n<start_of_image>…<end_of_image>\\n\\n`),
`<end_of_turn>\\n`, then `<start_of_turn>model\\n`; no system sentence. The BOS token comes from
llama.cpp's tokenizer. A server so configured gets the same token sequence as the checkpoint
run locally with transformers (or benchctl) when the request sends the image before the
question (`benchctl eval --endpoint … --image-position before-question`).

    python scripts/llama_cpp_gemma3_server.py --model M.gguf --clip_model_path MMPROJ.gguf \
        --logits_all true --n_ctx 512 --port 8000

Test harness only (`crates/benchctl/tests/eval_vqascore.rs`); needs llama-cpp-python[server].
"""
import sys

from llama_cpp import llama_chat_format

GEMMA3_FORMAT = (
    "{% for message in messages %}"
    "{% if message.role != 'system' %}"
    "{{ '<start_of_turn>' + ('model' if message.role == 'assistant' else message.role) + '\n' }}"
    "{% if message.content is string %}{{ message.content | trim }}"
    "{% else %}{% for content in message.content %}"
    "{% if content.type == 'image_url' %}"
    "{{ '\n\n' }}{{ content.image_url.url if content.image_url is mapping else content.image_url }}{{ '\n\n' }}"
    "{% elif content.type == 'text' %}{{ content.text | trim }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{{ '<end_of_turn>\n' }}"
    "{% endif %}{% endfor %}"
    "{{ '<start_of_turn>model\n' }}"
)


class Gemma3ChatHandler(llama_chat_format.Llava15ChatHandler):
    DEFAULT_SYSTEM_MESSAGE = None
    CHAT_FORMAT = GEMMA3_FORMAT


if __name__ == "__main__":
    # The server builds its multimodal handler by name when the model loads.
    llama_chat_format.Llava15ChatHandler = Gemma3ChatHandler
    from llama_cpp.server.__main__ import main

    if "--chat_format" not in sys.argv:
        sys.argv += ["--chat_format", "llava-1-5"]
    main()
