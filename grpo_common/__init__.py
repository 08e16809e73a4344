"""The bottom layer that tasks/, rewards/ and grpo_recipes/ share: the error type for user mistakes,
the prompt formats, and the response prefix a chat template pre-fills. It imports none of them."""
