"""A small ReAct agent traced into Phoenix over OTLP, as an OpenInference-instrumented agent
framework traces it: an AGENT root span holding the question and the final answer, an LLM
span per model call whose output is the ReAct text (Thought / Action / Action Input), and a
TOOL span per tool call with its input and observation.

No model is called: the agent's "LLM" answers are scripted per task, which is what the
traces look like to Phoenix and to the pipeline reading them back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from phoenix.otel import register

TOOLS = {
    "get_weather": lambda args: f"{args['city']}: 18C and sunny",
    "search": lambda args: f"Top result for {args['query']!r}: the Eiffel Tower is 330 m tall.",
    "calculator": lambda args: "1082.73",
}


@dataclass
class Task:
    question: str
    steps: list[tuple[str, str, dict]] = field(default_factory=list)
    """(thought, tool, arguments) per tool call."""
    answer: str = ""


TASKS = [
    Task("What is the weather in Paris?",
         [("I need the current weather in Paris.", "get_weather", {"city": "Paris"})],
         "It is 18C and sunny in Paris."),
    Task("How tall is the Eiffel Tower in feet?",
         [("I should look up the height of the Eiffel Tower.", "search",
           {"query": "Eiffel Tower height"}),
          ("330 m in feet is 330 * 3.281.", "calculator", {"expression": "330 * 3.281"})],
         "About 1083 feet."),
    Task("Say hello.", [], "Hello!"),
]


def react_text(thought: str, tool: str | None = None, args: dict | None = None,
               answer: str | None = None) -> str:
    if tool is not None:
        return f"Thought: {thought}\nAction: {tool}\nAction Input: {json.dumps(args)}"
    return f"Thought: {thought}\nFinal Answer: {answer}"


def run_agent(endpoint: str, project: str, tasks: list[Task] = TASKS) -> list[str]:
    """Run every task, traced into ``project``; the trace ids (hex), in order."""
    provider = register(endpoint=endpoint, project_name=project, batch=False,
                        set_global_tracer_provider=False, verbose=False)
    tracer = provider.get_tracer("react_agent")
    traces = []
    try:
        for task in tasks:
            with tracer.start_as_current_span("ReActAgent.run", attributes={
                    "openinference.span.kind": "AGENT", "input.value": task.question}) as root:
                for thought, tool, args in task.steps:
                    _llm(tracer, task.question, react_text(thought, tool, args))
                    with tracer.start_as_current_span(tool, attributes={
                            "openinference.span.kind": "TOOL", "tool.name": tool,
                            "input.value": json.dumps(args),
                            "output.value": TOOLS[tool](args)}):
                        pass
                _llm(tracer, task.question,
                     react_text("I can answer now.", answer=task.answer))
                root.set_attribute("output.value", task.answer)
                traces.append(format(root.get_span_context().trace_id, "032x"))
        provider.force_flush()
    finally:
        provider.shutdown()
    return traces


def _llm(tracer, question: str, output: str) -> None:
    with tracer.start_as_current_span("ChatModel.generate", attributes={
            "openinference.span.kind": "LLM", "llm.model_name": "scripted-react-model",
            "input.value": question,
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": question,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": output,
            "output.value": output}):
        pass
