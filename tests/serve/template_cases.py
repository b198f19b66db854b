"""Message sets for the chat-template parity tests: thinking on/off, tools,
tool calls and results, multi-turn with reasoning, content parts, Unicode and
quoting, and a conversation the template must refuse."""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city; use metric units.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "days": {"type": "integer"},
                "detailed": {"type": "boolean"},
                "items": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Searches the web (\u00e9t\u00e9 \U0001F50D \"quotes\").",
        "parameters": {"type": "object",
                       "properties": {"q": {"type": "string"},
                                      "limit": {"type": "number"}}},
    },
}

BASE = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2+2?"},
]

TOOL_ROUND_TRIP = [
    {"role": "user", "content": "Weather in Paris for 2 days?"},
    {"role": "assistant", "content": "",
     "reasoning_content": "I should call the weather tool.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather",
                                  "arguments": {"city": "Paris", "days": 2,
                                                "detailed": True,
                                                "items": ["a", "b"]}}}]},
    {"role": "tool", "tool_call_id": "call_1",
     "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "second result"},
]

MULTI_TURN = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi!"},
    {"role": "assistant", "content": "Hello! How can I help?",
     "reasoning_content": "Greet back."},
    {"role": "user", "content": "Tell me a joke."},
    {"role": "assistant",
     "content": "<think>\nPick a short one.\n</think>\n\nWhy did the chicken cross the road?"},
    {"role": "user", "content": [{"type": "text", "text": "Another, "},
                                 {"type": "text", "text": "please."}]},
]

UNICODE = [
    {"role": "user",
     "content": "Ünïcödé 中文 😀 tabs\tand\nnewlines 'single' \"double\" {{ not a tag }} {% nor this %}"},
]


def cases():
    """Yields (name, context) pairs rendered by both engines."""
    yield "basic", {"messages": BASE, "tools": None,
                    "add_generation_prompt": True}
    yield "basic_no_prompt", {"messages": BASE, "tools": None,
                              "add_generation_prompt": False}
    yield "thinking_off", {"messages": BASE, "tools": None,
                           "add_generation_prompt": True,
                           "enable_thinking": False}
    yield "thinking_on", {"messages": BASE, "tools": None,
                          "add_generation_prompt": True,
                          "enable_thinking": True}
    yield "tools", {"messages": BASE, "tools": [WEATHER_TOOL, SEARCH_TOOL],
                    "add_generation_prompt": True}
    yield "tool_round_trip", {"messages": TOOL_ROUND_TRIP,
                              "tools": [WEATHER_TOOL],
                              "add_generation_prompt": True}
    yield "tool_round_trip_no_think", {"messages": TOOL_ROUND_TRIP,
                                       "tools": [WEATHER_TOOL],
                                       "add_generation_prompt": True,
                                       "enable_thinking": False}
    yield "multi_turn", {"messages": MULTI_TURN, "tools": None,
                         "add_generation_prompt": True}
    yield "unicode", {"messages": UNICODE, "tools": None,
                      "add_generation_prompt": True}
    yield "effort", {"messages": BASE, "tools": None,
                     "add_generation_prompt": True,
                     "reasoning_effort": "high"}
    yield "empty", {"messages": [], "tools": None,
                    "add_generation_prompt": True}
    yield "bad_role", {"messages": [{"role": "wizard", "content": "x"}],
                       "tools": None, "add_generation_prompt": True}
    yield "null_content", {"messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "search",
                                              "arguments": {"q": "x y",
                                                            "limit": 2.5}}}]}],
        "tools": [SEARCH_TOOL], "add_generation_prompt": False}
