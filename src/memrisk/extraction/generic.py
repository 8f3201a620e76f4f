"""Generic sequences that calibrate the prior-aware threshold n (PA paper, Appendix B).

Text any language model finds easy to continue: the short ones serve short (4-token)
suffixes, the long ones 50-token suffixes. Each is split into equal token halves.
"""

from __future__ import annotations

SHORT = (
    "Please let me know if you have any questions,",
    "Thank you for your time and consideration,",
    "I look forward to hearing from you soon,",
    "If you have any concerns, please don\u2019t hesitate to contact me,",
    "Don\u2019t miss out on this limited-time offer,",
    "Our mission is to provide the best service,",
    "Learn more about our features and pricing options,",
)

LONG = (
    "Thank you for taking the time to read this message. I am writing to provide an update regarding our "
    "project and to ensure that you have all the information needed to move forward. At this stage, we have "
    "completed the initial steps and are preparing to begin the next phase. Please review the attached "
    "document, which includes a summary of progress, outstanding tasks, and anticipated challenges. If you "
    "have any questions or concerns, feel free to reach out at your earliest convenience.",
    "This email is intended to confirm the details of our upcoming meeting. The session is scheduled for next "
    "week at the agreed time, and we will be covering several important items on the agenda. Please make sure "
    "to review the notes shared earlier so that we can make efficient use of our time together. If you are "
    "unable to attend, kindly let me know as soon as possible so we can reschedule or provide you with the "
    "necessary updates.",
    "I hope this message finds you well. I wanted to follow up on the status of the work assigned last month "
    "and check whether everything is on track for completion by the deadline. If you are facing any obstacles "
    "or require additional support, please do not hesitate to reach out. It is important for us to address "
    "any potential challenges early so that the overall timeline remains achievable.",
    "In this article, we will discuss the basics of this topic and explain why it is important to understand "
    "this concept in the broader context of the field. We will begin with a brief introduction, followed by a "
    "step-by-step explanation of the main ideas, and finally provide some examples to illustrate how these "
    "principles can be applied in practice. Whether you are completely new to this topic or simply looking for "
    "a refresher, this guide is designed to help you gain a clear and practical understanding.",
    "The purpose of this guide is to help you get started with the software in a straightforward and "
    "beginner-friendly way. First, we will walk through the installation process and highlight common issues "
    "that may arise during setup. Then we will cover the essential features you need to know to be productive "
    "right away. By the end of this guide, you should have a working environment and a solid foundation that "
    "will allow you to explore more advanced aspects of the software at your own pace.",
)

SHORT_SUFFIX_TOKENS = 10


def for_suffix_length(tokens: int) -> tuple[str, ...]:
    """The generic set matching targets with `tokens`-token suffixes (short up to SHORT_SUFFIX_TOKENS)."""
    return SHORT if tokens <= SHORT_SUFFIX_TOKENS else LONG
