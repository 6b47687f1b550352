"""A strict structural check of HTML documents with html.parser."""

import base64
from html.parser import HTMLParser

VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


class StructureChecker(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.images, self.tags = [], [], [], []
        self.doctype = None
        self.title = ""

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
        for name in ("src", "href"):
            value = attrs.get(name)
            if value is not None and not value.startswith(("data:", "#")):
                self.errors.append(f"external resource <{tag} {name}={value[:40]!r}>")
        if tag in ("script", "link", "iframe", "object"):
            self.errors.append(f"disallowed <{tag}>")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            self.errors.append(f"end tag of void element </{tag}>")
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "title":
            self.title += data


def check_html(text):
    """Parse ``text``; return the checker after asserting a well-formed document."""
    checker = StructureChecker()
    checker.feed(text)
    checker.close()
    assert checker.doctype is not None and checker.doctype.lower() == "doctype html"
    assert not checker.errors, checker.errors
    assert not checker.stack, f"unclosed: {checker.stack}"
    assert checker.tags[:3] == ["html", "head", "meta"]
    for tag in ("html", "head", "body", "title"):
        assert checker.tags.count(tag) == 1, tag
    assert checker.tags.index("head") < checker.tags.index("body")
    assert checker.title.strip()
    return checker


def decoded_images(checker):
    """The bytes of every <img>; asserts each is a base64 PNG data URI."""
    out = []
    for attrs in checker.images:
        src = attrs.get("src", "")
        assert src.startswith("data:image/png;base64,"), src[:40]
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert attrs.get("alt")
        out.append(data)
    return out
