"""Texts used by make_fixtures.py and bench/llama_cpp_bench.py.

All texts were written for Sieve's test fixtures. Changing any of them changes
the generated fixtures, so regenerate tests/fixtures/ after an edit.
"""

# A ~2,000 character single paragraph (tokenizer fixture).
PARAGRAPH_2K = (
    "The lighthouse on the northern cape had been automated for almost thirty years, "
    "but Marta still climbed its one hundred and fourteen steps every evening, partly out "
    "of habit and partly because she liked to watch the fishing boats come home against "
    "the last of the light. From the gallery she could see the whole bay: the breakwater "
    "with its rusting crane, the row of painted houses along the harbour road, the church "
    "whose bell had cracked in the winter of 1987 and never been replaced, and beyond it "
    "all the long grey line of the open sea. Her grandfather had kept the light by hand, "
    "trimming wicks and winding the clockwork that turned the great lens, and he used to "
    "say that a keeper's real job was not to tend the lamp but to notice things. He noticed "
    "when the gulls flew inland before a storm, when the tide ran a little higher than the "
    "tables promised, when a boat that should have been back by six was still out at "
    "seven. Marta had inherited his notebooks, twenty-three of them, filled with a small "
    "slanted handwriting that recorded wind direction, barometric pressure, the colour of "
    "the sky at sunset, and occasionally a line of something closer to poetry: \"Fog so "
    "thick this morning that the foghorn seemed to come from inside my own chest.\" She "
    "had started to keep a notebook of her own, though she was not sure why. The "
    "instruments on the new weather station recorded everything more accurately than she "
    "ever could, and the data went straight to a server somewhere in the capital. Still, "
    "there was a difference between a number on a screen and the feeling of the wind "
    "changing on the back of your neck. Tonight the air was unusually still. The sea lay "
    "flat and pale, like a sheet of hammered tin, and the only sound was the faint ticking "
    "of the metal railing as it cooled. Somewhere below, a dog barked twice and then "
    "stopped. Marta opened the notebook, wrote the date, and after a moment's thought "
    "added: \"Calm. Too calm, Grandfather would have said.\""
)

# Long varied natural text for the long logits prompt (> 1,000 tokens with
# either tokenizer). Mixes narrative, exposition, a list, dialogue, numbers.
LONG_TEXT = PARAGRAPH_2K + "\n\n" + (
    "A short history of the bicycle\n\n"
    "The first machines that we would recognise as bicycles appeared in Europe in the early "
    "nineteenth century. The so-called running machine, introduced in 1817, had two wheels "
    "in line and a steerable front fork, but no pedals: the rider sat astride a wooden frame "
    "and pushed along the ground with both feet. It was fashionable for a few summers and "
    "then largely forgotten. Pedals attached directly to the front wheel arrived in the "
    "1860s, and because the distance travelled with each turn of the pedals depended on the "
    "size of that wheel, designers made the front wheel larger and larger. The result was "
    "the high-wheeler, sometimes called the penny-farthing, whose front wheel could be more "
    "than a metre and a half across. It was fast on a good road and terrifying on a bad one; "
    "a rider who hit a stone could be thrown forward over the handlebars, an accident common "
    "enough to have its own name.\n\n"
    "The safety bicycle of the 1880s solved the problem with a chain drive to the rear "
    "wheel, which allowed both wheels to be of moderate and equal size. Pneumatic tyres "
    "followed within a few years, and the diamond-shaped frame that most bicycles still use "
    "was settled by the end of the decade. The effect on ordinary life was considerable. "
    "For the first time, people who could not afford a horse could travel twenty or thirty "
    "kilometres in an afternoon, and historians have connected the bicycle with changes in "
    "everything from women's clothing to the spread of paved roads.\n\n"
    "Some practical advice for a first long ride:\n"
    "1. Check the tyre pressure before you leave; the recommended range is printed on the "
    "side of the tyre.\n"
    "2. Carry water, a spare inner tube, tyre levers and a small pump.\n"
    "3. Eat something every hour or so, even if you are not hungry.\n"
    "4. Start slower than you think you need to. The last ten kilometres are the ones that "
    "matter.\n\n"
    "\"Are you sure this is the right road?\" asked Tomas, squinting at the map.\n"
    "\"Completely sure,\" said Ines. \"Well, mostly sure. The sign said the village was "
    "twelve kilometres away, and we've done about eight.\"\n"
    "\"That sign was forty minutes ago.\"\n"
    "\"Then we're going uphill very slowly, which is also a kind of progress.\"\n\n"
    "How a refrigerator works\n\n"
    "A refrigerator does not create cold; it moves heat from the inside of the cabinet to "
    "the room outside. It does this by pumping a refrigerant around a closed loop. In the "
    "evaporator, inside the cabinet, the liquid refrigerant is allowed to expand and boil at "
    "a low pressure, and boiling absorbs heat from the surrounding air. The compressor then "
    "squeezes the resulting vapour, raising both its pressure and its temperature, and "
    "pushes it into the condenser coils at the back of the appliance, where it gives up its "
    "heat to the kitchen and turns back into a liquid. An expansion valve lowers the "
    "pressure again and the cycle repeats. The whole process obeys the second law of "
    "thermodynamics, because the work done by the compressor is what pays for moving heat "
    "from a colder place to a warmer one. A typical modern unit uses between 100 and 400 "
    "kilowatt-hours of electricity per year, depending on its size and age.\n\n"
    "Notes from a small market garden\n\n"
    "In March the soil is still too cold for most seeds, so the season begins indoors, in "
    "trays on a windowsill: tomatoes, peppers, a few early lettuces. By April the broad "
    "beans and peas can go outside, protected from the birds by a loose net. May is the "
    "busiest month, when everything wants to be planted at once and a late frost can undo "
    "a week of work in a single night. The summer brings its own problems: slugs after "
    "rain, aphids in the heat, and the constant question of whether to water today or wait "
    "for a storm that the forecast promises and the sky does not. Yet there is nothing quite "
    "like the first ripe tomato of the year, warm from the sun and eaten standing up between "
    "the rows. By September the harvest is more than the household can eat, and the kitchen "
    "fills with jars of chutney, bags of frozen beans and strings of onions hung to dry. In "
    "November the beds are covered with compost and left to rest, and the planning for next "
    "year begins, usually with a list of everything that went wrong this time."
)

# Plain completion prompts.
COMPLETION_SHORT = "The capital of France is"
COMPLETION_STORY = (
    "Once upon a time, in a small village at the edge of a great forest, there lived an old "
    "clockmaker who"
)
CODE_PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"

# Chat-formatted prompts (rendered by hand, exactly as each template renders).
SMOLLM2_CHAT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
# Gemma 3 270M in this project is the base model (no chat template in the
# GGUF); the turn markers are still in its vocabulary.
GEMMA3_CHAT = (
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n"
)

# Qwen2.5(-Coder) Instruct: ChatML with the template's own default system prompt.
QWEN2_CHAT = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\n<|im_start|>user\nWrite a Python function that checks whether a number is "
    "prime.<|im_end|>\n<|im_start|>assistant\n"
)
