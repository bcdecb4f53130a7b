"""The app's routes matched in one step, not a walk of ~270 (issue 30).

Starlette's router tries each route's regular expression in registration order until one matches
(~0.35 ms of a ``/healthz`` was that walk). ``RouteIndex`` takes the router's place in front of
its routes: a trie of the leading segments of each route's path template, each a literal or a
one-segment parameter (``/api/v1/subscriptions/{sub}/…`` under ``api`` → ``v1`` →
``subscriptions`` → any), leads, in one walk of the request path's segments, to the few routes
that could match it, in their registration order, and FastAPI's own ``APIRouter.app`` runs over
those alone. The semantics stay the router's exactly:

- A route can only match a path whose segments fit its leading pattern (literals are escaped in
  its regular expression; ``{name}``, int, float and uuid parameters take one non-empty segment),
  so the routes left out return ``Match.NONE``: the first full match in registration order wins,
  and the first partial one (a method mismatch: 405) is the one taken when none matches fully,
  as in the walk.
- A router included in another is placed by its prefix. A route whose matching the index cannot
  read from a template (a route class of its own, such as the online gateway's, a ``Host``) is a
  candidate for every path, in its place.
- When no candidate matches, the whole router runs as before (the walk, then its trailing-slash
  redirect, its low-priority routes and its 404): what happens then is the router's own.

The trie is built on the first request after the routes are all in (``studio.install`` adds its
routes after ``create_app``) and again whenever their count changes. A router with low-priority
routes (FastAPI's frontend routes) is left to walk: those are matched before the default and after
the redirect, an order the per-candidate router could not keep.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import fastapi.routing
from fastapi.routing import APIRoute, APIRouter, APIWebSocketRoute
from starlette._utils import get_route_path
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

# The route classes whose matching is their compiled path template alone (``matches`` not
# overridden): the index reads their leading segments from the template.
_TEMPLATE_MATCHES = frozenset(
    {Route.matches, WebSocketRoute.matches, Mount.matches, APIRoute.matches, APIWebSocketRoute.matches}
)
# A router included in another (``include_router``: the studio's form pages) matches the paths
# under its prefix only: FastAPI joins the prefix and each of its routes' paths, which begin with
# "/" (or are empty), so the prefix's segments are whole.
_INCLUDED_ROUTER: type | None = getattr(fastapi.routing, "_IncludedRouter", None)
# A whole segment ``{name}`` or ``{name:str|int|float|uuid}`` matches one non-empty segment (their
# regular expressions take no "/"); ``{name:path}``, a converter of the app's own or text beside
# a parameter end what the index reads of a template.
_ONE_SEGMENT = re.compile(r"^{[A-Za-z_][A-Za-z0-9_]*(:(str|int|float|uuid))?}$")
ANY = None  # a pattern's element for "any non-empty segment"


def leading_pattern(route: BaseRoute) -> tuple[str | None, ...] | None:
    """The segments every path ROUTE matches starts with: each a literal, or ``ANY`` (one
    non-empty segment); None when the index cannot tell (the route is then a candidate for every
    path)."""
    if _INCLUDED_ROUTER is not None and type(route) is _INCLUDED_ROUTER:
        template = getattr(getattr(route, "include_context", None), "prefix", None)
    elif getattr(type(route), "matches", None) in _TEMPLATE_MATCHES:
        template = getattr(route, "path", None)
    else:
        return None
    if not isinstance(template, str) or not template.startswith("/"):
        return None  # a Mount at the root (""), an included router without a prefix: every path
    pattern: list[str | None] = []
    for segment in template.split("/")[1:]:
        if "{" not in segment:
            pattern.append(segment)
        elif _ONE_SEGMENT.match(segment):
            pattern.append(ANY)
        else:
            break
    return tuple(pattern)


@dataclass(eq=False)
class _Node:
    """A trie node: its children by literal segment and for any segment, and the positions (in the
    router's routes) of the routes whose leading pattern ends here."""

    literal: dict[str, _Node] = field(default_factory=dict)
    any: _Node | None = None
    here: list[int] = field(default_factory=list)


class _State:
    """Where a path's walk stands after some of its segments: the trie nodes its segments reached
    (``frontier``; none once no route can take more) and the routes met on the way
    (``positions``). The next state is kept per literal of the frontier, for "" and for any other
    segment (under "/", which no segment holds), so a path is matched by about one dictionary
    look-up per segment; the states are as few as the trie's shapes."""

    __slots__ = ("frontier", "literals", "narrowed", "next", "positions")

    def __init__(self, frontier: tuple[_Node, ...], positions: frozenset[int]) -> None:
        self.frontier, self.positions = frontier, positions
        self.literals = frozenset(segment for node in frontier for segment in node.literal)
        self.next: dict[str, _State] = {}
        self.narrowed: APIRouter | None = None


OTHER = "/"  # the key of the state after a segment that is no literal of the frontier


class RouteIndex:
    """ASGI app in place of ROUTER's own matching (``router.middleware_stack``): the candidates of
    a request's path, found by its segments, matched by FastAPI's code in their order."""

    def __init__(self, router: APIRouter) -> None:
        self.router = router
        self._start: _State | None = None  # None: not indexable (the router walks)
        self._everywhere: frozenset[int] = frozenset()  # routes the index cannot place
        self._built_for = -1  # len(router.routes) when the trie was built
        self._states: dict[tuple[frozenset[int], frozenset[int]], _State] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        narrowed = self._narrowed_for(get_route_path(scope)) if scope["type"] != "lifespan" else None
        if narrowed is None:
            await self.router.app(scope, receive, send)
            return
        scope.setdefault("router", self.router)  # url_for reads every route, not the candidates
        await narrowed.app(scope, receive, send)

    def candidates(self, path: str) -> list[BaseRoute] | None:
        """The routes PATH may match, in registration order; None when the router walks them all
        (for tests and measurement)."""
        narrowed = self._narrowed_for(path)
        return None if narrowed is None else list(narrowed.routes)

    def _narrowed_for(self, path: str) -> APIRouter | None:
        state = self._current()
        if state is None:
            return None
        for segment in path.split("/")[1:]:
            following = state.next.get(segment)
            state = following if following is not None else self._following(state, segment)
            if not state.frontier:
                break
        narrowed = state.narrowed
        if narrowed is None:
            ordered = sorted(state.positions)
            narrowed = state.narrowed = self._router_over([self.router.routes[i] for i in ordered])
        return narrowed

    def _following(self, state: _State, segment: str) -> _State:
        """STATE's next state for SEGMENT, worked out once per literal, for "" and for the rest."""
        key = segment if segment in state.literals or not segment else OTHER
        following = state.next.get(key)
        if following is None:
            reached: list[_Node] = []
            for node in state.frontier:
                child = node.literal.get(segment)
                if child is not None:
                    reached.append(child)
                if node.any is not None and segment:  # a parameter takes a non-empty segment
                    reached.append(node.any)
            positions = state.positions.union(*(node.here for node in reached))
            following = state.next[key] = self._state(tuple(reached), positions)
        return following

    def _state(self, frontier: tuple[_Node, ...], positions: frozenset[int]) -> _State:
        key = (frozenset(id(node) for node in frontier), positions)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _State(frontier, positions)
        return state

    def _current(self) -> _State | None:
        routes = self.router.routes
        if self._built_for != len(routes):  # routes are added before serving, not while
            self._states.clear()
            self._start = None
            if _keeps_fallback_order(self.router):
                root = self._build(routes)
                self._start = self._state((root,), self._everywhere.union(root.here))
            self._built_for = len(routes)
        return self._start

    def _build(self, routes: Sequence[BaseRoute]) -> _Node:
        root = _Node()
        everywhere = []
        for position, route in enumerate(routes):
            pattern = leading_pattern(route)
            if pattern is None:
                everywhere.append(position)
                continue
            node = root
            for element in pattern:
                if element is ANY:
                    node.any = node.any or _Node()
                    node = node.any
                else:
                    node = node.literal.setdefault(element, _Node())
            node.here.append(position)
        self._everywhere = frozenset(everywhere)
        return root

    def _router_over(self, candidates: list[BaseRoute]) -> APIRouter:
        """A shallow copy of the app's router over CANDIDATES: FastAPI's matching code, its form
        limits and its scope updates as they are; when none matches, the whole router's walk."""
        narrowed = copy.copy(self.router)
        narrowed.routes = candidates
        narrowed.redirect_slashes = False  # the whole router's to do, over all its routes
        narrowed.default = self.router.app
        return narrowed


def _keeps_fallback_order(router: APIRouter) -> bool:
    """Whether the index keeps the router's order of fallbacks: not with low-priority routes,
    which FastAPI matches after the trailing-slash redirect and before the 404."""
    low_priority = getattr(router, "_iter_low_priority_routes", None)
    return low_priority is None or next(iter(low_priority()), None) is None


def install(router: APIRouter) -> RouteIndex:
    """Put a ``RouteIndex`` in front of ROUTER's routes (the app's router: ``app.router``)."""
    index = RouteIndex(router)
    router.middleware_stack = index
    return index
