"""pymarkdownlnt rule GFL001 (unclosed-fence): a fenced code block whose closing fence is missing.

CommonMark accepts it, so pymarkdownlnt's own rules do, but the page is broken: a forgotten
closing fence makes the block swallow what follows, up to the next bare fence (the closing
fence of the next block, whose opening fence, info string and all, becomes a line of code)
or to the end of the document (or of its list item or quote). This rule reports both:

* a block the end of its container closed (no closing fence at all);
* a block with a line that can only be a swallowed opening fence: the block's fence
  character, at least as many times as the block's fence (so it cannot be a shorter fence
  shown inside a longer one) and then an info string (so it cannot close the block).

Loaded by the Markdown lint with ``--add-plugin`` (tests/docs_tools.py).
"""

import re

from pymarkdown.plugin_manager.plugin_details import PluginDetails
from pymarkdown.plugin_manager.rule_plugin import RulePlugin


class UnclosedFence(RulePlugin):
    """Report the opening fence of a block that its closing fence does not end."""

    def __init__(self):
        super().__init__()
        self.__open = []

    def get_details(self):
        return PluginDetails(
            plugin_name="unclosed-fence",
            plugin_id="GFL001",
            plugin_enabled_by_default=True,
            plugin_description="Fenced code block without its closing fence",
            plugin_version="0.1.0",
            plugin_interface_version=1,
        )

    def starting_new_file(self):
        self.__open = []

    def next_token(self, context, token):
        if token.is_fenced_code_block:
            char, count = token.fence_character, token.fence_count
            opener = re.compile(r"^ {0,3}%s{%d,}[ \t]*[^ \t%s]" % (re.escape(char), count, re.escape(char)))
            self.__open.append([token, opener, None])
        elif token.is_fenced_code_block_end and self.__open:
            start, swallowed = self.__open.pop()[0::2]
            if token.was_forced:
                self.report_next_token_error(context, start, "the block runs to the end of its container")
            elif swallowed is not None:
                self.report_next_token_error(
                    context, start, "the block swallows the opening fence %r (line %d)"
                    % (swallowed[1].strip(), swallowed[0]))
        elif token.is_text and self.__open and self.__open[-1][2] is None:
            block = self.__open[-1]
            for index, line in enumerate(token.token_text.split("\n")):
                if block[1].match(line):
                    block[2] = (token.line_number + index, line)
                    break
