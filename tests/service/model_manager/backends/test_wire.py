"""The proxy's wire conversions invert the backend's (service.convert), so a call crosses the hop unchanged.

(a) Requests: for a message ``p`` a client could send, the engine request the server makes of it,
``forward(p)``, is sent to the backend as ``inverse(forward(p))``, which the backend reads back
with the same converter: ``forward(inverse(forward(p))) == forward(p)``.

(b) Results: what the backend's engine returns, ``r``, is sent as ``forward_response(r)`` and
read back by the proxy: ``inverse(forward_response(r)) == r``.

Every message crosses as bytes (serialized and parsed again), as it does between the processes.
A coverage check makes sure every engine field is set away from its default in some case, so a
field the inverse drops cannot go unnoticed.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from universal_runtime.v1 import encoders_pb2, generation_pb2, tokenization_pb2

from engines.encoder_types import (
    Classification,
    ClassificationRequest,
    ClassificationResult,
    Entity,
    EntityResult,
    LabelScore,
    RankedDocument,
    RerankResult,
)
from engines.types import (
    MAX_DRAFT_TOKENS,
    ChatMessage,
    EmbeddingEncoding,
    EmbeddingResult,
    FinishReason,
    GenerationDelta,
    GenerationRequest,
    GenerationUsage,
    ResponseFormat,
    SamplingParams,
    TokenizeRequest,
    TokenizeResult,
    TokenLogprob,
    TokenLogprobs,
    ToolCallDelta,
    ToolSpec,
)
from service.convert import embedding as convert_embedding
from service.convert import encoders as convert_encoders
from service.convert import generation as convert_generation
from service.convert import tokenization as convert_tokenization
from service.model_manager.backends import wire
from service.tasks.generation import ChoiceDelta, Timings

MODEL = "org/model-1"
MAX_INPUTS = 1000
MAX_TOKENS = 4096
MAX_CHOICES = 8
REQUEST_ID = "req-0123"
INT32 = (-(2**31), 2**31 - 1)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def hop(message):
    """The message as the other process parses it."""
    return type(message).FromString(message.SerializeToString())


# -- strategies -----------------------------------------------------------------------------------

texts = st.text(max_size=40)
nonblank = st.text(min_size=1, max_size=40).filter(lambda s: s.strip() != "")
int32s = st.integers(*INT32)
counts = st.integers(0, 2**31 - 1)
float32s = st.floats(width=32, allow_nan=False)
unit32 = st.floats(0.0, 1.0, width=32)
truncations = st.sampled_from(list(encoders_pb2.TruncationPolicy.values()))


def _defaults(cls) -> dict[str, object]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _set_fields(obj, prefix: str = "") -> set[str]:
    """Dotted names of ``obj``'s fields (nested dataclasses and lists of them too) away from their default.

    A field without a default counts as set.
    """
    found = set()
    defaults = _defaults(type(obj))
    for f in dataclasses.fields(obj):
        value, name = getattr(obj, f.name), prefix + f.name
        if f.name not in defaults or value != defaults[f.name]:
            found.add(name)
        if dataclasses.is_dataclass(value):
            found |= _set_fields(value, name + ".")
        elif isinstance(value, list):
            for item in value:
                if dataclasses.is_dataclass(item):
                    found |= _set_fields(item, name + "[].")
    return found


def _all_fields(cls, nested: dict[str, type], prefix: str = "") -> set[str]:
    found = set()
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        found.add(name)
        for key in (name, name + "[]"):
            if key in nested:
                found |= _all_fields(nested[key], nested, key + ".")
    return found


def assert_every_field_covered(instances, nested: dict[str, type]) -> None:
    """Each field of the instances' type (and of its ``nested`` types) is away from its default in one."""
    covered = set().union(*(_set_fields(x) for x in instances))
    missing = _all_fields(type(instances[0]), nested) - covered
    assert not missing, f"no case sets {sorted(missing)}: a dropped field would go unnoticed"


# -- (a) requests: forward(inverse(forward(p))) == forward(p) ----------------------------------------


def forward_generate(message) -> GenerationRequest:
    return convert_generation.generation_request(
        message, REQUEST_ID, max_tokens_limit=MAX_TOKENS, max_choices=MAX_CHOICES
    )


def forward_tokenize(message) -> TokenizeRequest:
    return convert_tokenization.tokenize_request(message, max_tokens_limit=MAX_TOKENS)


WEATHER_SCHEMA = (
    '{"type": "object", "properties": {"city": {"type": "string", "description": "Zürich or 東京"},'
    ' "days": {"type": "integer", "minimum": 1}}, "required": ["city"]}'
)
ANSWER_SCHEMA = (
    '{"type":"object","properties":{"answer":{"type":"string"},"sources":{"type":"array",'
    '"items":{"type":"string"}}},"required":["answer","sources"],"additionalProperties":false}'
)

CHAT = [
    generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_SYSTEM, content="You are terse."),
    generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_DEVELOPER, content="Use tools when asked."),
    generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content="Weather in Zürich?", name="ana"),
    generation_pb2.ChatMessage(
        role=generation_pb2.CHAT_ROLE_ASSISTANT,
        content="",
        reasoning_content="The user wants the weather; call the tool.",
        tool_calls=[
            generation_pb2.ToolCall(id="call_1", name="get_weather", arguments_json='{"city": "Zürich"}'),
            generation_pb2.ToolCall(id="call_2", name="get_time", arguments_json="{}"),
        ],
    ),
    generation_pb2.ChatMessage(
        role=generation_pb2.CHAT_ROLE_TOOL,
        content='{"temp_c": 21}',
        tool_call_id="call_1",
        name="get_weather",
    ),
    generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_TOOL, content="12:00", tool_call_id="call_2"),
    generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_ASSISTANT, content="21 °C at noon."),
    generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content="And tomorrow? 🌦"),
]
TOOLS = [
    generation_pb2.ToolDefinition(
        name="get_weather", description="Current weather of a city.", parameters_json_schema=WEATHER_SCHEMA
    ),
    generation_pb2.ToolDefinition(name="get_time"),  # no parameters: the empty object schema
]

GENERATE_REQUESTS = {
    "prompt only, defaults": generation_pb2.GenerateStreamRequest(model=MODEL, prompt="Once upon a time"),
    "prompt, every sampling parameter": generation_pb2.GenerateStreamRequest(
        model=MODEL,
        prompt="List three colours:",
        keep_alive="5m",
        parameters=generation_pb2.GenerationParameters(
            max_tokens=256,
            temperature=0.7,
            top_p=0.9,
            top_k=40,
            min_p=0.05,
            repetition_penalty=1.1,
            presence_penalty=-0.5,
            frequency_penalty=0.25,
            seed=2**40 + 7,
            stop=["\n\n", "END", ""],
            n=1,
            logprobs=True,
            top_logprobs=5,
            logit_bias=[
                generation_pb2.LogitBias(token_id=50256, bias=-100.0),
                generation_pb2.LogitBias(token_id=13, bias=2.5),
            ],
            response_format=generation_pb2.ResponseFormat(
                type=generation_pb2.RESPONSE_FORMAT_TYPE_JSON_OBJECT
            ),
            reasoning_budget=128,
            reasoning_effort=generation_pb2.REASONING_EFFORT_HIGH,
            speculative=generation_pb2.SpeculativeDecoding(enabled=False, num_tokens=4),
        ),
    ),
    "chat with tools, tool results and a named tool": generation_pb2.GenerateStreamRequest(
        model=MODEL,
        messages=CHAT,
        parameters=generation_pb2.GenerationParameters(
            seed=-1,
            tools=TOOLS,
            tool_choice=generation_pb2.ToolChoice(
                mode=generation_pb2.TOOL_CHOICE_MODE_FUNCTION, function_name="get_weather"
            ),
            reasoning_effort=generation_pb2.REASONING_EFFORT_NONE,
            speculative=generation_pb2.SpeculativeDecoding(enabled=True, num_tokens=MAX_DRAFT_TOKENS),
        ),
    ),
    "chat, json schema, required tool, thinking off": generation_pb2.GenerateStreamRequest(
        model=MODEL,
        messages=CHAT[:3],
        parameters=generation_pb2.GenerationParameters(
            temperature=0.0,
            max_tokens=64,
            response_format=generation_pb2.ResponseFormat(
                type=generation_pb2.RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
                json_schema=ANSWER_SCHEMA,
                schema_name="a",
            ),
            tools=TOOLS[:1],
            tool_choice=generation_pb2.ToolChoice(mode=generation_pb2.TOOL_CHOICE_MODE_REQUIRED),
            reasoning_budget=0,
            logprobs=True,
        ),
    ),
    "chat, tools off, effort low, text format": generation_pb2.GenerateStreamRequest(
        model=MODEL,
        messages=[generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content="hi")],
        parameters=generation_pb2.GenerationParameters(
            tools=TOOLS,
            tool_choice=generation_pb2.ToolChoice(mode=generation_pb2.TOOL_CHOICE_MODE_NONE),
            reasoning_effort=generation_pb2.REASONING_EFFORT_LOW,
            response_format=generation_pb2.ResponseFormat(type=generation_pb2.RESPONSE_FORMAT_TYPE_TEXT),
            stop=["</s>"],
        ),
    ),
    "chat, effort medium, auto tools": generation_pb2.GenerateStreamRequest(
        model=MODEL,
        messages=[
            generation_pb2.ChatMessage(
                role=generation_pb2.CHAT_ROLE_ASSISTANT, content="", reasoning_content="thinking only"
            ),
            generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_USER, content="go on"),
        ],
        parameters=generation_pb2.GenerationParameters(
            tools=TOOLS[1:],
            tool_choice=generation_pb2.ToolChoice(mode=generation_pb2.TOOL_CHOICE_MODE_AUTO),
            reasoning_effort=generation_pb2.REASONING_EFFORT_MEDIUM,
        ),
    ),
}

_GENERATION_NESTED = {
    "params": SamplingParams,
    "response_format": ResponseFormat,
    "messages[]": ChatMessage,
    "tools[]": ToolSpec,
}


def test_the_generation_cases_set_every_engine_field():
    assert_every_field_covered([forward_generate(p) for p in GENERATE_REQUESTS.values()], _GENERATION_NESTED)


@pytest.mark.parametrize("message", GENERATE_REQUESTS.values(), ids=GENERATE_REQUESTS.keys())
def test_generation_request_crosses_unchanged(message):
    engine = forward_generate(message)
    sent = hop(wire.generate_stream_request(MODEL, engine))
    assert sent.model == MODEL
    assert not sent.parameters.HasField("n")  # one choice
    assert forward_generate(sent) == engine


@st.composite
def generation_parameters(draw) -> generation_pb2.GenerationParameters:
    """Any valid GenerationParameters of a raw prompt (tools need messages: the hand-built cases)."""
    p = generation_pb2.GenerationParameters()
    if draw(st.booleans()):
        p.max_tokens = draw(st.integers(1, MAX_TOKENS))
    for name, (low, high, low_open) in convert_generation.SAMPLING_RANGES.items():
        if draw(st.booleans()):
            setattr(p, name, draw(st.floats(low, high, width=32, exclude_min=low_open)))
    if draw(st.booleans()):
        p.top_k = draw(st.integers(0, 2**31 - 1))
    if draw(st.booleans()):
        p.seed = draw(st.integers(-(2**63), 2**63 - 1))
    p.stop.extend(draw(st.lists(texts, max_size=convert_generation.MAX_STOP_SEQUENCES)))
    p.logprobs = draw(st.booleans())
    if p.logprobs:
        p.top_logprobs = draw(st.integers(0, 20))
    for token_id, bias in draw(st.lists(st.tuples(int32s, st.floats(-100, 100, width=32)), max_size=4)):
        p.logit_bias.add(token_id=token_id, bias=bias)
    p.response_format.type = draw(
        st.sampled_from(
            [
                generation_pb2.RESPONSE_FORMAT_TYPE_UNSPECIFIED,
                generation_pb2.RESPONSE_FORMAT_TYPE_TEXT,
                generation_pb2.RESPONSE_FORMAT_TYPE_JSON_OBJECT,
                generation_pb2.RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
            ]
        )
    )
    if p.response_format.type == generation_pb2.RESPONSE_FORMAT_TYPE_JSON_SCHEMA:
        p.response_format.json_schema = draw(st.sampled_from([WEATHER_SCHEMA, ANSWER_SCHEMA, "{}"]))
    if draw(st.booleans()):
        p.reasoning_budget = draw(st.integers(0, p.max_tokens if p.HasField("max_tokens") else MAX_TOKENS))
    p.reasoning_effort = draw(st.sampled_from(list(generation_pb2.ReasoningEffort.values())))
    if draw(st.booleans()):
        p.speculative.enabled = draw(st.booleans())
    p.speculative.num_tokens = draw(st.integers(0, MAX_DRAFT_TOKENS))
    return p


@SETTINGS
@given(parameters=generation_parameters(), prompt=nonblank)
def test_any_prompt_request_crosses_unchanged(parameters, prompt):
    engine = forward_generate(
        generation_pb2.GenerateStreamRequest(model=MODEL, prompt=prompt, parameters=parameters)
    )
    assert forward_generate(hop(wire.generate_stream_request(MODEL, engine))) == engine


def test_a_float_made_in_the_server_arrives_as_its_float32():
    engine = GenerationRequest(request_id=REQUEST_ID, prompt="x", params=SamplingParams(temperature=0.1))
    back = forward_generate(hop(wire.generate_stream_request(MODEL, engine)))
    assert back.params.temperature == float(np.float32(0.1))


def test_parsed_tool_call_arguments_travel_as_json():
    message = ChatMessage(
        role="assistant",
        content="",
        tool_calls=[
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": [1, "é"]}}}
        ],
    )
    engine = GenerationRequest(request_id=REQUEST_ID, messages=[message])
    back = forward_generate(hop(wire.generate_stream_request(MODEL, engine)))
    assert back.messages[0].tool_calls[0]["function"]["arguments"] == '{"a":[1,"é"]}'


def test_an_unknown_role_is_refused():
    engine = GenerationRequest(request_id=REQUEST_ID, messages=[ChatMessage(role="narrator", content="x")])
    with pytest.raises(ValueError, match="narrator"):
        wire.generate_stream_request(MODEL, engine)


TOKENIZE_REQUESTS = {
    "prompt, defaults": tokenization_pb2.TokenizeRequest(model=MODEL, prompt="hello world"),
    "prompt, no special tokens, strings and offsets": tokenization_pb2.TokenizeRequest(
        model=MODEL,
        prompt="héllo 世界",
        add_special_tokens=False,
        return_token_strings=True,
        return_offsets=True,
    ),
    "chat with tools and a thinking budget": tokenization_pb2.TokenizeRequest(
        model=MODEL,
        messages=CHAT,
        add_special_tokens=True,
        add_generation_prompt=False,
        return_offsets=True,
        tools=TOOLS,
        tool_choice=generation_pb2.ToolChoice(
            mode=generation_pb2.TOOL_CHOICE_MODE_FUNCTION, function_name="get_time"
        ),
        reasoning_budget=32,
        reasoning_effort=generation_pb2.REASONING_EFFORT_HIGH,
    ),
    "chat, thinking off by effort": tokenization_pb2.TokenizeRequest(
        model=MODEL,
        messages=CHAT[2:3],
        add_generation_prompt=True,
        reasoning_effort=generation_pb2.REASONING_EFFORT_NONE,
    ),
}


def test_the_tokenize_cases_set_every_engine_field():
    assert_every_field_covered(
        [forward_tokenize(p) for p in TOKENIZE_REQUESTS.values()],
        {"messages[]": ChatMessage, "tools[]": ToolSpec},
    )


@pytest.mark.parametrize("message", TOKENIZE_REQUESTS.values(), ids=TOKENIZE_REQUESTS.keys())
def test_tokenize_request_crosses_unchanged(message):
    engine = forward_tokenize(message)
    assert forward_tokenize(hop(wire.tokenize_request(MODEL, engine))) == engine


@SETTINGS
@given(token_ids=st.lists(int32s, max_size=50), skip=st.booleans())
def test_detokenize_request_crosses_unchanged(token_ids, skip):
    engine = convert_tokenization.detokenize_request(
        tokenization_pb2.DetokenizeRequest(model=MODEL, token_ids=token_ids, skip_special_tokens=skip)
    )
    assert convert_tokenization.detokenize_request(hop(wire.detokenize_request(MODEL, engine))) == engine


@st.composite
def embed_requests(draw) -> encoders_pb2.EmbedRequest:
    message = encoders_pb2.EmbedRequest(
        model=MODEL,
        inputs=draw(st.lists(nonblank, min_size=1, max_size=5)),
        normalize=draw(st.booleans()),
        dimensions=draw(st.integers(0, 4096)),
        truncation=draw(truncations),
        encoding=draw(st.sampled_from(list(encoders_pb2.EmbeddingEncoding.values()))),
        keep_alive=draw(st.sampled_from(["", "10m"])),
    )
    prompt = draw(st.sampled_from(["none", "prompt", "prompt_name"]))
    if prompt != "none":
        setattr(message, prompt, draw(nonblank))
    return message


def forward_embed(message):
    return convert_embedding.embedding_request(message, max_inputs=MAX_INPUTS)


def test_the_embed_cases_set_every_engine_field():
    cases = [
        encoders_pb2.EmbedRequest(model=MODEL, inputs=["a"]),
        encoders_pb2.EmbedRequest(
            model=MODEL,
            inputs=["query: a", "b"],
            normalize=True,
            dimensions=256,
            truncation=encoders_pb2.TRUNCATION_POLICY_ERROR,
            prompt_name="query",
            encoding=encoders_pb2.EMBEDDING_ENCODING_UBINARY,
        ),
        encoders_pb2.EmbedRequest(model=MODEL, inputs=["c"], prompt="Represent this sentence: "),
    ]
    engines = [forward_embed(c) for c in cases]
    assert_every_field_covered(engines, {})
    for message, engine in zip(cases, engines, strict=True):
        assert forward_embed(hop(wire.embed_request(MODEL, engine))) == engine, message


@SETTINGS
@given(message=embed_requests())
def test_embed_request_crosses_unchanged(message):
    engine = forward_embed(message)
    assert forward_embed(hop(wire.embed_request(MODEL, engine))) == engine


@SETTINGS
@given(
    query=nonblank,
    documents=st.lists(nonblank, min_size=1, max_size=5),
    top_n=st.integers(0, 100),
    return_documents=st.booleans(),
    truncation=truncations,
)
def test_rerank_request_crosses_unchanged(query, documents, top_n, return_documents, truncation):
    message = encoders_pb2.RerankRequest(
        model=MODEL,
        query=query,
        documents=documents,
        top_n=top_n,
        return_documents=return_documents,
        truncation=truncation,
    )
    engine = convert_encoders.rerank_request(message, max_inputs=MAX_INPUTS)
    sent = hop(wire.rerank_request(MODEL, engine))
    assert convert_encoders.rerank_request(sent, max_inputs=MAX_INPUTS) == engine


@SETTINGS
@given(
    inputs=st.lists(nonblank, min_size=1, max_size=5),
    multi_label=st.booleans(),
    all_scores=st.booleans(),
    threshold=unit32,
    labels=st.lists(nonblank, max_size=5, unique=True),
    truncation=truncations,
)
def test_classify_request_crosses_unchanged(inputs, multi_label, all_scores, threshold, labels, truncation):
    message = encoders_pb2.ClassifyRequest(
        model=MODEL,
        inputs=inputs,
        multi_label=multi_label,
        all_scores=all_scores,
        threshold=threshold,
        candidate_labels=labels,
        truncation=truncation,
    )
    engine = convert_encoders.classification_request(message, max_inputs=MAX_INPUTS)
    sent = hop(wire.classify_request(MODEL, engine))
    assert convert_encoders.classification_request(sent, max_inputs=MAX_INPUTS) == engine


def test_a_zero_threshold_is_sent_as_the_smallest_positive_float32():
    """The message's 0 means 0.5; a threshold of 0 made in the server must not become 0.5."""
    engine = ClassificationRequest(inputs=["x"], multi_label=True, threshold=0.0)
    back = convert_encoders.classification_request(hop(wire.classify_request(MODEL, engine)), max_inputs=1)
    assert 0.0 < back.threshold == wire.ZERO_THRESHOLD < 1e-44
    assert dataclasses.replace(back, threshold=0.0) == engine


@SETTINGS
@given(
    inputs=st.lists(nonblank, min_size=1, max_size=5),
    min_score=unit32,
    labels=st.lists(texts, max_size=5),
)
def test_entities_request_crosses_unchanged(inputs, min_score, labels):
    message = encoders_pb2.ExtractEntitiesRequest(
        model=MODEL, inputs=inputs, min_score=min_score, labels=labels
    )
    engine = convert_encoders.entity_request(message, max_inputs=MAX_INPUTS)
    sent = hop(wire.entities_request(MODEL, engine))
    assert convert_encoders.entity_request(sent, max_inputs=MAX_INPUTS) == engine


# -- (b) results: inverse(forward_response(r)) == r ---------------------------------------------------

scores32 = st.floats(0.0, 1.0, width=32)
logprobs32 = st.one_of(st.floats(max_value=0.0, width=32, allow_nan=False), st.just(-math.inf))


@SETTINGS
@given(
    vectors=hnp.arrays(
        np.float32,
        st.tuples(st.integers(1, 6), st.integers(1, 48)),
        elements=st.floats(width=32, allow_nan=False),
    ),
    prompt_tokens=counts,
)
def test_float_embeddings_come_back_unchanged(vectors, prompt_tokens):
    result = EmbeddingResult(vectors=vectors, prompt_tokens=prompt_tokens)
    back = wire.embedding_result(hop(convert_embedding.embed_response(MODEL, result)))
    assert back.vectors.dtype == np.float32
    np.testing.assert_array_equal(back.vectors, vectors, strict=True)
    assert (back.prompt_tokens, back.quantized, back.encoding) == (
        prompt_tokens,
        None,
        EmbeddingEncoding.FLOAT,
    )


@SETTINGS
@given(
    encoding=st.sampled_from([e for e in EmbeddingEncoding if e is not EmbeddingEncoding.FLOAT]),
    rows=st.integers(1, 6),
    dimensions=st.integers(1, 70),
    prompt_tokens=counts,
    data=st.data(),
)
def test_quantized_embeddings_come_back_without_their_floats(encoding, rows, dimensions, prompt_tokens, data):
    dtype = np.int8 if encoding in (EmbeddingEncoding.INT8, EmbeddingEncoding.BINARY) else np.uint8
    width = math.ceil(dimensions / 8) if encoding.name.endswith("BINARY") else dimensions
    quantized = data.draw(hnp.arrays(dtype, (rows, width)))
    vectors = np.random.default_rng(0).standard_normal((rows, dimensions), dtype=np.float32)
    result = EmbeddingResult(
        vectors=vectors, prompt_tokens=prompt_tokens, quantized=quantized, encoding=encoding
    )
    response = hop(convert_embedding.embed_response(MODEL, result))
    back = wire.embedding_result(response)
    np.testing.assert_array_equal(back.quantized, quantized, strict=True)
    assert (back.prompt_tokens, back.encoding) == (prompt_tokens, encoding)
    # The floats are not in the response: right shape, all NaN, read-only.
    assert back.vectors.shape == vectors.shape and back.vectors.dtype == np.float32
    assert np.isnan(back.vectors).all() and not back.vectors.flags.writeable
    # What the server builds of it for the client is the backend's response.
    assert convert_embedding.embed_response(MODEL, back) == response


def test_embeddings_out_of_order_or_of_the_wrong_length_are_refused():
    response = convert_embedding.embed_response(MODEL, EmbeddingResult(np.ones((2, 3), np.float32), 1))
    response.embeddings[0].index = 1
    with pytest.raises(ValueError, match="index"):
        wire.embedding_result(response)
    response.embeddings[0].index = 0
    response.embeddings[1].values.append(1.0)
    with pytest.raises(ValueError, match="4 values"):
        wire.embedding_result(response)


@SETTINGS
@given(
    results=st.lists(
        st.builds(RankedDocument, index=counts, relevance_score=float32s, document=st.none() | nonblank),
        max_size=6,
    ),
    prompt_tokens=counts,
)
def test_rerank_results_come_back_unchanged(results, prompt_tokens):
    result = RerankResult(prompt_tokens=prompt_tokens, results=results)
    assert wire.rerank_result(hop(convert_encoders.rerank_response(MODEL, result))) == result


label_scores = st.lists(st.builds(LabelScore, label=texts, score=scores32), max_size=4)


@SETTINGS
@given(
    classifications=st.lists(
        st.builds(
            Classification, label=texts, score=scores32, predicted_labels=label_scores, scores=label_scores
        ),
        min_size=1,
        max_size=5,
    ),
    prompt_tokens=counts,
)
def test_classifications_come_back_unchanged(classifications, prompt_tokens):
    result = ClassificationResult(prompt_tokens=prompt_tokens, classifications=classifications)
    assert wire.classification_result(hop(convert_encoders.classify_response(MODEL, result))) == result


entities = st.builds(Entity, text=texts, label=nonblank, start=counts, end=counts, score=scores32)


@SETTINGS
@given(lists=st.lists(st.lists(entities, max_size=4), min_size=1, max_size=4), prompt_tokens=counts)
def test_entities_come_back_unchanged(lists, prompt_tokens):
    result = EntityResult(prompt_tokens=prompt_tokens, entities=lists)
    assert wire.entity_result(hop(convert_encoders.entities_response(MODEL, result))) == result


def test_results_out_of_input_order_are_refused():
    result = EntityResult(prompt_tokens=1, entities=[[], []])
    response = convert_encoders.entities_response(MODEL, result)
    response.results[1].index = 0
    with pytest.raises(ValueError, match=r"results\[1\] has index 0"):
        wire.entity_result(response)


@st.composite
def tokenize_results(draw) -> TokenizeResult:
    n = draw(st.integers(0, 20))
    return TokenizeResult(
        token_ids=draw(st.lists(int32s, min_size=n, max_size=n)),
        max_context_tokens=draw(counts),
        token_strings=draw(st.sampled_from([[], *[draw(st.lists(texts, min_size=n, max_size=n))]])),
        offsets=draw(st.lists(st.tuples(counts, counts), min_size=n, max_size=n) | st.just([])),
        rendered_prompt=draw(st.none() | nonblank),
    )


@SETTINGS
@given(result=tokenize_results())
def test_tokenize_results_come_back_unchanged(result):
    assert wire.tokenize_result(hop(convert_tokenization.tokenize_response(MODEL, result))) == result


@SETTINGS
@given(text=st.text())
def test_detokenized_text_comes_back_unchanged(text):
    assert wire.detokenize_text(hop(convert_tokenization.detokenize_response(MODEL, text))) == text


def forward_delta(delta: GenerationDelta) -> generation_pb2.GenerateStreamResponse:
    """The backend's message for one engine delta (usage and timings on the last, as it sends them)."""
    timings = Timings(12.5, 40.0, 900.0) if delta.usage is not None else None
    event = ChoiceDelta("gen-" + "0" * 32, 0, delta, usage=delta.usage, timings=timings)
    return hop(convert_generation.stream_response(MODEL, event))


token_logprobs = st.builds(TokenLogprob, token_id=int32s, token=texts, logprob=logprobs32)
# Half the int32 range: the message also carries their sum (total_tokens), an int32.
usage_counts = st.integers(0, 2**30 - 1)
usages = st.builds(
    GenerationUsage,
    prompt_tokens=usage_counts,
    completion_tokens=usage_counts,
    cached_prompt_tokens=usage_counts,
    reasoning_tokens=usage_counts,
    draft_tokens=usage_counts,
    accepted_draft_tokens=usage_counts,
)
generation_deltas = st.builds(
    GenerationDelta,
    text=texts,
    reasoning=texts,
    token_ids=st.lists(int32s, max_size=8),
    finish_reason=st.none() | st.sampled_from(list(FinishReason)),
    usage=st.none() | usages,
    logprobs=st.lists(
        st.builds(TokenLogprobs, sampled=token_logprobs, top=st.lists(token_logprobs, max_size=3).map(tuple)),
        max_size=3,
    ),
    tool_calls=st.lists(
        st.builds(ToolCallDelta, index=counts, id=texts, name=texts, arguments_delta=texts), max_size=3
    ),
    stop_sequence=texts,
)

DELTAS = {
    "empty": GenerationDelta(),
    "a token": GenerationDelta(text="Hel", token_ids=[9906]),
    "thinking": GenerationDelta(reasoning="Let me think", token_ids=[1, 2, 3]),
    "logprobs": GenerationDelta(
        text="lo",
        token_ids=[385],
        logprobs=[
            TokenLogprobs(
                sampled=TokenLogprob(385, "lo", -0.125),
                top=(
                    TokenLogprob(385, "lo", -0.125),
                    TokenLogprob(1609, "p", -2.5),
                    TokenLogprob(0, "\ufffd", -math.inf),
                ),
            )
        ],
    ),
    "tool call pieces": GenerationDelta(
        tool_calls=[
            ToolCallDelta(index=0, id="call_1", name="get_weather", arguments_delta='{"city": '),
            ToolCallDelta(index=1, id="call_2", name="get_time"),
        ]
    ),
    "last, stop sequence": GenerationDelta(
        text=".",
        finish_reason=FinishReason.STOP,
        stop_sequence="\n\n",
        usage=GenerationUsage(12, 30, 8, 10, 20, 15),
    ),
    "last, tool calls": GenerationDelta(
        tool_calls=[ToolCallDelta(index=0, arguments_delta="}")],
        finish_reason=FinishReason.TOOL_CALLS,
        usage=GenerationUsage(prompt_tokens=5, completion_tokens=9),
    ),
    "last, length": GenerationDelta(finish_reason=FinishReason.LENGTH, usage=GenerationUsage()),
    "last, cancelled": GenerationDelta(finish_reason=FinishReason.CANCELLED, usage=GenerationUsage(1, 1)),
}


def test_the_delta_cases_set_every_field_and_every_finish_reason():
    assert_every_field_covered(list(DELTAS.values()), {"usage": GenerationUsage})
    assert {d.finish_reason for d in DELTAS.values()} == {None, *FinishReason}


@pytest.mark.parametrize("delta", DELTAS.values(), ids=DELTAS.keys())
def test_generation_delta_comes_back_unchanged(delta):
    assert wire.generation_delta(forward_delta(delta)) == delta


@SETTINGS
@given(delta=generation_deltas)
def test_any_generation_delta_comes_back_unchanged(delta):
    assert wire.generation_delta(forward_delta(delta)) == delta


def test_an_unknown_finish_reason_is_refused():
    with pytest.raises(ValueError, match="finish reason 99"):
        wire.generation_delta(generation_pb2.GenerateStreamResponse(finish_reason=99))
