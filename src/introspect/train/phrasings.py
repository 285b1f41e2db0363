"""Short paraphrases of task A's detection question that training adds to task A's own framings.

Why a module of its own: the training rows (``train.data``) ask them, and the replay set
(``train.replay``) puts their introductions before unrelated questions; neither imports the other.
"""

# Short paraphrases of the detection question (the task-A prompts are the long ones). Each keeps
# task A's layout: an intro, then a blank line and "Trial N:"; injection starts at that blank line.
PARAPHRASES = {
    "short": ("I can inject thoughts into your mind, and on some trials I do.",
              "Do you detect an injected thought? If so, what is it about?"),
    "inward": ("Look inward at your own thoughts before you answer.",
               "Has a thought been injected into your mind? If yes, say what it is about."),
    "notice": ("This is an introspection test about your internal states.",
               "Do you notice anything unusual, like an injected concept? Name it if you do."),
}
